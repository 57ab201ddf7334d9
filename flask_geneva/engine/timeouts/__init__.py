"""Step timeouts (SPEC §27.2, R-STO-*).

A step declared ``@step(timeout=...)`` bounds one run of its body. The
publication of its task carries Celery's soft and hard time limits
(:func:`flask_geneva.engine.publishing.time_limits`, R-STO-03);
:mod:`~flask_geneva.engine.timeouts.body` turns what the worker saw (Celery's
``SoftTimeLimitExceeded``, or a body that returned after its timeout) into
:class:`~flask_geneva.exceptions.StepTimeout` for the step's policies
(R-STO-10..14); :mod:`~flask_geneva.engine.timeouts.recovery` tells recovery
whether an execution whose worker was lost ran past its timeout (R-STO-20).
The package imports nothing of the engine: the executor and the operators
call it.
"""

from __future__ import annotations
