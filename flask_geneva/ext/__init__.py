"""Flask and Celery: the extension, the Celery tasks and publisher, start-up checks.

The layer that knows the frameworks: ``extension`` (``Geneva.init_app``),
``app_state`` (per-app settings, task backend, engine context), ``operations``
(the public executor, housekeeping and dispatch entry points), ``tasks`` (the
Celery task shells, fixed names), ``celery_publisher``, ``model_engine`` (the
engine behind the model methods), ``worker_processes``, ``broker_checks``,
``startup_checks``, ``integrations`` (entry points of the CLI and the admin) and
``autogenerate`` (Flask-Migrate's filter).
"""
