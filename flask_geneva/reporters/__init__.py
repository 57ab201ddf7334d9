"""Ready-made ``GENEVA_ERROR_REPORTER`` adapters (SPEC §9.6, R-REP-03).

- :mod:`flask_geneva.reporters.logging`: logs each report with its context.
- :mod:`flask_geneva.reporters.sentry`: sends each report to Sentry; needs the
  optional ``sentry`` extra (``pip install "flask-geneva[sentry]"``).

Neither module is imported by ``flask_geneva`` itself, so the Sentry SDK is only
loaded when that adapter is used.
"""

from __future__ import annotations
