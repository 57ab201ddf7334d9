"""Workflow signals (SPEC §23): send, the ``wait_for`` gate, wake, consume.

``delivery`` stores a signal and wakes the execution waiting for it; ``heroes``
finds the workflow ``signal_hero`` delivers to; ``waits`` is the dispatcher's
handling of signal timeouts and lost wakes.
"""
