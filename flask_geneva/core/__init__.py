"""Pure foundations: settings, clock, durations, keys, cursors, logging helpers.

The lowest layer of flask_geneva (see docs/architecture.md): no database access,
no framework. Every other layer may import it; it imports only
``flask_geneva.exceptions`` and ``flask_geneva.signals``.
"""
