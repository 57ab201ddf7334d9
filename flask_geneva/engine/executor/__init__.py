"""The executor: claim a step execution, run the step's body, record the outcome.

``step`` is the entry point (``execute_step``); ``prepare``, ``run``,
``outcomes``, ``events`` and ``continuation`` are its stages; ``policy_decisions``
turns an exception policy's result into a transition; ``early_delivery`` handles
a Celery message that arrived before its execution was due.
"""
