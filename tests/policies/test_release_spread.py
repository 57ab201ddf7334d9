"""Housekeeping's recovery and multi-id CLI resumes spread their releases (R-SCH-20)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import GenevaConfigurationError
from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.core.config import DEFAULTS
from flask_geneva.core.config import config_from_mapping
from flask_geneva.policies.release_spread import active_window
from flask_geneva.policies.release_spread import release_offset
from flask_geneva.policies.release_spread import spread_releases
from tests.apps.basic import geneva
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the subprocess CLI fixture
from tests.support.common_workflows import EmptyOneStep
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

SPREAD = timedelta(seconds=5)


def as_utc(value):
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def stuck_workflows(count):
    workflows = [
        EmptyOneStep.create(hero=make_user(f"spread{n}@example.com"))
        for n in range(count)
    ]
    for workflow in workflows:
        make_in_progress(workflow, T0)
    return workflows


def test_recovery_spreads_the_reattempts_over_the_window(app, geneva_jobs):
    """20 recovered workflows are due at now + their own offset in [0, 5 s) (R-SCH-20, R-HK-24)."""
    with clock.frozen(T0) as frozen:
        workflows = stuck_workflows(20)
        now = frozen.advance(timedelta(hours=2))
        geneva_jobs.clear()
        assert run_housekeeping()["stuck_in_progress_recovered"] == 20
    due = {}
    for workflow in workflows:
        new = execution_rows(workflow.id)[-1]
        assert new["state"] == "scheduled"
        due[workflow.id] = as_utc(new["scheduled_for"])
        assert due[workflow.id] == now + release_offset(workflow.id, SPREAD)
        assert now <= due[workflow.id] < now + SPREAD
    assert len(set(due.values())) == 20  # not one moment for all
    assert max(due.values()) - min(due.values()) > SPREAD / 2
    # The publications carry the spread times as their eta (R-DSP-01).
    etas = sorted(as_utc(p.eta) for p in geneva_jobs.enqueued)
    assert etas == sorted(due.values())


def test_zero_spread_releases_everything_at_once(app, geneva_jobs):
    """GENEVA_RELEASE_SPREAD = 0 keeps the recovery due now (R-SCH-20)."""
    app.config["GENEVA_RELEASE_SPREAD"] = 0
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflows = stuck_workflows(3)
        now = frozen.advance(timedelta(hours=2))
        run_housekeeping()
    assert {as_utc(execution_rows(w.id)[-1]["scheduled_for"]) for w in workflows} == {
        now
    }


def test_offsets_are_deterministic_and_inside_the_window():
    """Same workflow id → same offset; every offset is in [0, window) (R-SCH-20)."""
    assert release_offset(42, SPREAD) == release_offset(42, SPREAD)
    offsets = [release_offset(n, SPREAD) for n in range(500)]
    assert all(timedelta(0) <= o < SPREAD for o in offsets)
    assert len(set(offsets)) > 490
    with spread_releases(timedelta(0)):
        assert active_window() is None
    with spread_releases(SPREAD):
        assert active_window() == SPREAD
    assert active_window() is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1, "GENEVA_RELEASE_SPREAD must be non-negative, got -1"),
        (timedelta(hours=2), "GENEVA_RELEASE_SPREAD must be at most 1 hour"),
        ("5s", "GENEVA_RELEASE_SPREAD must be a timedelta or a number of seconds"),
        (None, "GENEVA_RELEASE_SPREAD is required"),
    ],
)
def test_bad_spread_settings_are_refused_naming_the_value(value, fragment):
    """The setting is validated like the other durations (R-SCH-20, R-CFG-01)."""
    with pytest.raises(GenevaConfigurationError, match=fragment):
        config_from_mapping({**DEFAULTS, "GENEVA_RELEASE_SPREAD": value}, testing=True)


def test_accepted_spread_settings():
    """Seconds and timedeltas up to 1 hour are accepted (R-SCH-20)."""
    for value, expected in ((0, 0), (2.5, 2.5), (timedelta(hours=1), 3600)):
        config = config_from_mapping(
            {**DEFAULTS, "GENEVA_RELEASE_SPREAD": value}, testing=True
        )
        assert config.release_spread == timedelta(seconds=expected)


def test_cli_resume_of_several_ids_spreads_them(geneva_cli, user):  # noqa: F811
    """`flask geneva resume A B` releases each at now + its offset (R-SCH-20, R-CLI-02)."""
    workflows = [
        CliOnboarding.create(hero=make_user(f"cli{n}@example.com")) for n in range(2)
    ]
    for workflow in workflows:
        workflow.pause()  # preserves the scheduled execution, overdue below
        update_execution(
            workflow.current_execution.id,
            scheduled_for=datetime.now(UTC) - timedelta(minutes=1),
        )
    before = datetime.now(UTC)
    result = geneva_cli("resume", *(str(w.id) for w in workflows))
    after = datetime.now(UTC)
    assert result.returncode == 0, result.stderr
    for workflow in workflows:
        offset = release_offset(workflow.id, SPREAD)
        (row,) = execution_rows(workflow.id)
        assert row["state"] == "scheduled"
        due = as_utc(row["scheduled_for"])
        assert before + offset - timedelta(milliseconds=1) <= due <= after + offset


def test_cli_resume_of_one_id_is_not_spread(geneva_cli, user):  # noqa: F811
    """A single resume keeps the overdue time: nothing to spread (R-SCH-20)."""
    workflow = CliOnboarding.create(hero=user)
    workflow.pause()
    overdue = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    update_execution(workflow.current_execution.id, scheduled_for=overdue)
    result = geneva_cli("resume", str(workflow.id))
    assert result.returncode == 0, result.stderr
    assert as_utc(execution_rows(workflow.id)[0]["scheduled_for"]) == overdue
