"""The worker registry: this process's registrations, heartbeats and liveness.

``registry`` (registrations and heartbeat threads), ``running`` (the executions a
registration's process runs) and ``health`` (what operators see: live and dead
workers, warnings).
"""
