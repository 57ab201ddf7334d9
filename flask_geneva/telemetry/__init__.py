"""Telemetry: OpenTelemetry spans, trace contexts and meters (SPEC §28, issue 38).

Everything here goes through ``opentelemetry-api`` only (the optional extra
``otel``); without it installed nothing here imports it and a step pays nothing.
The application brings the SDK, its exporters and its sampler.
"""

from __future__ import annotations
