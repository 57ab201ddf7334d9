"""``flask geneva limits [NAME] [--json]``, the status line and ``show``'s sentence.

R-LIM-40: one line per (limit, key) with activity, most waiting first, capped
with "… N more keys"; declared limits without a busy key read "idle"; an unknown
NAME is a usage error listing the declared names; without the unit the command
names ``flask geneva install``. R-LIM-42: ``flask geneva show`` prints a waiter's
sentence. R-LIM-43: ``flask geneva status`` prints "limits: N keys busy, ...".
A rate-limited key's line ends with its use of the window ("rate 7/10 per 1
min", "(next start in 10 s)" when full) and --json has its fields (R-LIM-23).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.db.queries import limits as limit_reads
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.cli.test_cli import assert_one_line_error
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.limit_rows import park
from tests.support.limit_rows import record_starts
from tests.support.limit_rows import set_key
from tests.support.workflow import make_user

cli_partner = Limit("cli-partner-api", concurrency=2, key=lambda wf: "acme")
cli_exports = Limit("cli-exports", concurrency=5)
cli_rate = Limit("cli-rate", rate=10, per=timedelta(minutes=1))


class CliPartnerSync(geneva.Workflow):
    @step(limit=cli_partner)
    def push(self):
        pass

    @step(limit=cli_exports)
    def export(self):
        pass

    @step(limit=cli_rate)
    def notify(self):
        pass


def _waiter(email, key="acme", *, since):
    workflow = CliPartnerSync.create(hero=make_user(email))
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    park(*ids, "cli-partner-api", key, since=since)
    return ids


def _picture():
    """acme: 2/2 running, 2 waiting (oldest 3 min 12 s); globex: 1/2 running;
    initech: an idle key row."""
    now = clock.now()
    set_key("cli-partner-api", "acme", running=2, waiting=2)
    set_key("cli-partner-api", "globex", running=1)
    set_key("cli-partner-api", "initech")
    first = _waiter("a@example.com", since=now - timedelta(minutes=3, seconds=12))
    _waiter("b@example.com", since=now - timedelta(seconds=5))
    return first


def _lines(result):
    return [" ".join(line.split()) for line in result.stdout.splitlines()]


def test_one_line_per_busy_key_most_waiting_first_and_idle_limits(
    geneva_cli,  # noqa: F811
    geneva_jobs,
):
    """R-LIM-40: busy keys by waiting desc; an idle key row is not listed; a
    declared limit with nothing busy reads idle with its concurrency."""
    _picture()
    result = geneva_cli("limits")
    assert result.returncode == 0, result.stderr
    lines = _lines(result)
    mine = [line for line in lines if line.startswith("cli-")]
    assert mine[0].startswith(
        "cli-partner-api key=acme running 2/2 granted 0 waiting 2 (oldest 3 min 1"
    )
    assert mine[1] == "cli-partner-api key=globex running 1/2 granted 0 waiting 0"
    assert "cli-exports idle (concurrency 5)" in mine
    assert "cli-rate idle (rate 10 per 1 min)" in mine
    assert not [line for line in lines if "initech" in line]
    assert len(mine) == 4


def test_name_shows_one_limit(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40: NAME restricts the lines to that limit; a declared idle one says so."""
    _picture()
    set_key("cli-exports", "", running=1, concurrency=5)
    result = geneva_cli("limits", "cli-exports")
    assert result.returncode == 0, result.stderr
    assert _lines(result) == ["cli-exports global running 1/5 granted 0 waiting 0"]
    set_key("cli-exports", "", concurrency=5)
    assert _lines(geneva_cli("limits", "cli-exports")) == [
        "cli-exports idle (concurrency 5)"
    ]


def test_an_unknown_name_is_a_usage_error_listing_the_declared_limits(
    geneva_cli,  # noqa: F811
    geneva_jobs,
):
    """R-LIM-40: exit status 2 and the declared names."""
    result = geneva_cli("limits", "no-such-limit")
    assert result.returncode == 2
    assert "unknown limit 'no-such-limit'" in result.stderr
    assert "cli-exports, " in result.stderr
    assert "cli-partner-api" in result.stderr


def test_json_gives_the_same_data(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40: --json has the keys, how many more, and the idle limits."""
    _picture()
    result = geneva_cli("limits", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    mine = [entry for entry in report["keys"] if entry["limit"] == "cli-partner-api"]
    assert [entry["key"] for entry in mine] == ["acme", "globex"]
    acme = mine[0]
    assert (acme["running"], acme["granted"], acme["waiting"]) == (2, 0, 2)
    assert acme["concurrency"] == 2
    assert 192 <= acme["oldest_wait_seconds"] < 250
    assert acme["oldest_waiting_since"].startswith(str(clock.now().year))
    assert mine[1]["oldest_wait_seconds"] is None
    assert report["more_keys"] == 0
    assert {
        "limit": "cli-exports",
        "concurrency": 5,
        "rate": None,
        "per_seconds": None,
    } in report["idle_limits"]
    assert {
        "limit": "cli-rate",
        "concurrency": None,
        "rate": 10,
        "per_seconds": 60.0,
    } in report["idle_limits"]


def test_the_list_is_capped_with_n_more_keys(geneva_cli, monkeypatch, geneva_jobs):  # noqa: F811
    """R-LIM-40: past the cap, "… N more keys" (the cap lowered to 2 here)."""
    monkeypatch.setattr(limit_reads, "MAX_OVERVIEW_KEYS", 2)
    for number in range(5):
        set_key("cli-partner-api", f"tenant-{number}", running=1)
    result = geneva_cli("limits", "cli-partner-api")
    assert result.returncode == 0, result.stderr
    lines = _lines(result)
    assert len([line for line in lines if "key=tenant-" in line]) == 2
    assert lines[-1] == "… 3 more keys"
    report = json.loads(geneva_cli("limits", "cli-partner-api", "--json").stdout)
    assert report["more_keys"] == 3


def test_keys_are_escaped_and_odd_ones_quoted(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40: a key is stored text: control characters escaped, spaces quoted."""
    set_key("cli-partner-api", "evil\x1b[31m", running=1)
    set_key("cli-partner-api", "two words", running=1)
    result = geneva_cli("limits", "cli-partner-api")
    assert "\x1b" not in result.stdout
    assert 'key="two words"' in result.stdout


def test_without_the_unit_the_command_says_how_to_install_it(
    geneva_cli,  # noqa: F811
    without_unit,
    geneva_jobs,
):
    """R-LIM-40, R-LIM-50: a one-line error naming flask geneva install."""
    without_unit("add_flow_limits")
    result = geneva_cli("limits")
    assert_one_line_error(result, "flask geneva install")
    assert "add_flow_limits" in result.stderr


def test_status_prints_the_limits_line_only_when_a_key_is_busy(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-43: "limits: N keys busy, M waiting, oldest D"; none when idle."""
    set_key("cli-partner-api", "initech")
    assert "limits:" not in geneva_cli("status").stdout
    _picture()
    result = geneva_cli("status")
    assert result.returncode == 0, result.stderr
    line = next(
        line for line in result.stdout.splitlines() if line.startswith("limits:")
    )
    assert line.startswith("limits: 2 keys busy, 2 waiting, oldest 3 min 1")
    status = json.loads(geneva_cli("status", "--json").stdout)
    assert status["limits"]["keys_busy"] == 2
    assert status["limits"]["limits"]["cli-partner-api"]["keys"] == 3


def test_status_without_the_unit_has_no_limits(geneva_cli, without_unit, geneva_jobs):  # noqa: F811
    """R-LIM-43: status works and says nothing of limits without the unit."""
    without_unit("add_flow_limits")
    result = geneva_cli("status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["limits"] is None


def test_show_prints_the_waiters_sentence(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-42: `flask geneva show` says what the waiting step waits for."""
    workflow_id, _ = _picture()
    result = geneva_cli("show", str(workflow_id))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "limit:" in line)
    assert " ".join(line.split()).startswith(
        "limit: step push: waiting for a cli-partner-api slot (key acme, "
        "2 of 2 running, 2 waiting, position 1) since 3 min 1"
    )


def test_a_rate_limit_shows_its_slots_without_a_cap(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40: a limit without concurrency prints "running N" and, idle, its
    rate and window; a key row without a rate used has no rate column."""
    assert "cli-rate idle (rate 10 per 1 min)" in _lines(geneva_cli("limits"))
    set_key("cli-rate", "", running=1, concurrency=None)
    assert _lines(geneva_cli("limits", "cli-rate")) == [
        "cli-rate global running 1 granted 0 waiting 0"
    ]


def _rated_key(ages):
    """cli-rate's global key (10 per 1 min) running 1, starts of these ages."""
    set_key(
        "cli-rate",
        "",
        running=1,
        concurrency=None,
        rate=10,
        per=timedelta(minutes=1),
    )
    return record_starts("cli-rate", "", ages)


def test_a_rate_limit_shows_its_starts_in_the_window(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40, R-LIM-23: "rate 7/10 per 1 min": the starts within the last
    minute by the database's clock (one 2 min old is out of the window); no next
    start while the window has room."""
    ages = [timedelta(minutes=2)] + [timedelta(seconds=5 * i) for i in range(1, 8)]
    _rated_key(ages)
    assert _lines(geneva_cli("limits", "cli-rate")) == [
        "cli-rate global running 1 granted 0 waiting 0 rate 7/10 per 1 min"
    ]
    report = json.loads(geneva_cli("limits", "cli-rate", "--json").stdout)
    [entry] = report["keys"]
    assert (entry["rate"], entry["per_seconds"], entry["rate_used"]) == (10, 60.0, 7)
    assert entry["next_start_at"] is None
    assert entry["next_start_in_seconds"] is None


def test_a_full_rate_window_says_when_the_next_start_is_allowed(
    geneva_cli,  # noqa: F811
    geneva_jobs,
):
    """R-LIM-40, R-LIM-23: "rate 10/10 per 1 min (next start in 10 s)": the
    oldest start in the window (50 s old) plus the minute, by the database's
    clock; --json has the time and the seconds."""
    starts = _rated_key([timedelta(seconds=5 * i) for i in range(1, 11)])
    [line] = _lines(geneva_cli("limits", "cli-rate"))
    assert re.fullmatch(
        r"cli-rate global running 1 granted 0 waiting 0 rate 10/10 per 1 min "
        r"\(next start in (9|10) s\)",
        line,
    ), line
    report = json.loads(geneva_cli("limits", "cli-rate", "--json").stdout)
    [entry] = report["keys"]
    assert entry["rate_used"] == 10
    oldest = min(starts)
    assert entry["next_start_at"] == (oldest + timedelta(minutes=1)).isoformat()
    assert 8.0 < entry["next_start_in_seconds"] <= 10.0
