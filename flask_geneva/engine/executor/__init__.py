"""The executor: claim a step execution, run the step's body, record the outcome.

``step`` is the entry point (``execute_step``). Each step is one run: a
``run.StepRun`` holding the run's state, passed to the stages, which are
functions: ``prepare`` (claim), ``body`` (run the body), ``finalize`` (record
the outcome, through ``outcomes``) and ``continuation`` (claim the next step
inline). ``events`` sends the run's signals and reports (the exception policy's
decision is :mod:`flask_geneva.engine.policy_decisions`'s); ``early_delivery``
handles a Celery message that arrived before its execution was due.
"""
