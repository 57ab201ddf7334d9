"""Orchestration: takes a context and a session, applies transitions, commits.

No Flask, Celery, kombu, Flask-Admin, Flask-SQLAlchemy or Werkzeug import here or
below (the import contracts in pyproject.toml). Inside, from the bottom up: the
transition table (``transitions/``), publishing and the outbox, the worker
registry (``workers/``), scheduling, workflow signals (``workflow_signals/``),
flow control, the operators' actions and housekeeping (``operators/``), and the
executor (``executor/``).
"""
