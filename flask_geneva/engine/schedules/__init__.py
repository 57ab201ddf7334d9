"""Schedules: recurring starts fired by the dispatcher (SPEC §26).

* :mod:`.firing`: which fire times fire, once each across dispatchers
  (R-SCHED-20, R-SCHED-23);
* :mod:`.fan_out`: a fire's workflows, one batch of heroes per transaction,
  resumable (R-SCHED-22);
* :mod:`.heroes`: reading one batch of a ``heroes`` callable's result;
* :mod:`.operations`: pause, resume, run now and the overview for operators
  (R-SCHED-30..34).

The declaration is :mod:`flask_geneva.dsl.schedules`; the statements are
:mod:`flask_geneva.db.schedules`.
"""

from __future__ import annotations

from flask_geneva.engine.schedules.firing import FiringPass
from flask_geneva.engine.schedules.firing import fire_schedules
from flask_geneva.engine.schedules.operations import RunNow
from flask_geneva.engine.schedules.operations import ScheduleOverview
from flask_geneva.engine.schedules.operations import pause_schedule
from flask_geneva.engine.schedules.operations import recent_fires
from flask_geneva.engine.schedules.operations import resume_schedule
from flask_geneva.engine.schedules.operations import run_schedule_now
from flask_geneva.engine.schedules.operations import schedule_overview

__all__ = [
    "FiringPass",
    "RunNow",
    "ScheduleOverview",
    "fire_schedules",
    "pause_schedule",
    "recent_fires",
    "resume_schedule",
    "run_schedule_now",
    "schedule_overview",
]
