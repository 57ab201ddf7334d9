"""Schema installation: what ``flask geneva install`` does, as plain functions.

``flask geneva install`` never changes the database (R-MIG-01). It writes Alembic
revision files into the host's Flask-Migrate directory, one per logical schema unit
(R-MIG-02), chained after the current head; ``flask db upgrade`` then applies them.

- :mod:`~flask_geneva.db.install.units`: the schema units and table names.
- :mod:`~flask_geneva.db.install.key_type`: the key type (bigint or UUID), detected
  from the host's tables (R-DM-20/21); it must agree with the ``key_type`` the app
  passes to :class:`~flask_geneva.Geneva`.
- :mod:`~flask_geneva.db.install.revisions`: rendering and writing the revision files.
  Each is rendered from a template in ``migration_templates/`` beside it and only
  needs Alembic and SQLAlchemy, so files written by an old version keep working
  after flask_geneva is upgraded. Each carries its unit name (``GENEVA_DRIVE_UNIT``,
  message and file slug ``geneva_drive_<unit>``); re-running install writes only the
  missing units (R-MIG-03), and every unit checks the live schema before changing it
  (R-MIG-04).
- :mod:`~flask_geneva.db.install.install`:
  :func:`~flask_geneva.db.install.install.write_missing_revisions`, the whole
  command given a directory and an engine; the Flask side (the app's
  migrations directory, engine and key type) is
  :func:`flask_geneva.ext.schema_install.install`.
- :mod:`~flask_geneva.ext.autogenerate`: keeps ``flask db migrate``/``flask db
  check`` from proposing changes to what only our migrations manage.
"""
