"""``flask geneva show`` of parents and children (R-CHD-60).

A child's header has a ``parent:`` line (the parent's id, class and state, the
starting step and execution, the key), a parent's a ``children:`` line (the
counts row: started, settled, failed, the execution parked for them and its
threshold). ``--children`` adds the counts per state and a page of children by
id (``--limit``, ``--after``, the "… more: --after N" hint). Stored text is
escaped; without the add_child_workflows unit nothing is read.
"""

from __future__ import annotations

import sqlalchemy as sa

from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.cli.test_cli import CliOnboarding
from tests.cli.test_cli import assert_one_line_error
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.operator_children import OpsChild
from tests.support.operator_children import build_family
from tests.support.operator_children import waiting_execution_id
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user


def _line(result, prefix):
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stdout.splitlines() if x.startswith(prefix)]
    return " ".join(line.split())


def _children_table(result):
    lines = result.stdout.splitlines()
    start = lines.index("Children:") + 1
    return [" ".join(line.split()) for line in lines[start:]]


def test_a_parent_shows_its_counts_and_the_waiting_execution(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: the children line reads the counts row; without --children
    no per-state line and no page."""
    parent_id, _ = build_family(geneva_jobs, failing={"part-1"})
    waiting = waiting_execution_id(parent_id)
    result = geneva_cli("show", str(parent_id))
    assert _line(result, "  children:") == (
        f"children: started 3, settled 1, failed 1; execution {waiting} waits "
        "for 3 settled"
    )
    assert "by state:" not in result.stdout
    assert "Children:" not in result.stdout
    assert "parent:" not in result.stdout
    # The family lines close the header, before the step plan.
    lines = result.stdout.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("  children:"))) == (
        lines.index("Step plan:") - 1
    )


def test_a_reached_threshold_is_said(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: once as many children settled as the parked execution waits
    for, the line says its wake is on its way."""
    parent_id, child_ids = build_family(geneva_jobs)
    waiting = waiting_execution_id(parent_id)
    for child_id in child_ids:
        OpsChild.get(child_id).cancel()
    assert _line(geneva_cli("show", str(parent_id)), "  children:") == (
        f"children: started 3, settled 3, failed 3; execution {waiting} waits "
        "for 3 settled (reached: its wake is on its way)"
    )


def test_show_children_lists_states_and_a_page_by_id(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: --children prints the counts per state and the children by
    id: id, class, state, key, starting step, child_settled."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    result = geneva_cli("show", str(parent_id), "--children")
    assert _line(result, "  by state:") == "by state: ready 2, paused 1"
    a, b, c = child_ids
    assert _children_table(result) == [
        "id class state key step settled",
        f"{a} OpsChild ready part-0 fan_out -",
        f"{b} OpsChild paused part-1 fan_out failed",
        f"{c} OpsChild ready part-2 fan_out -",
    ]
    assert "more:" not in result.stdout


def test_pages_go_by_id_with_limit_and_after(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: --limit N children after --after ID, then "… more: --after N"
    while more follow; an empty page says so."""
    keys = [f"part-{n}" for n in range(5)]
    parent_id, child_ids = build_family(geneva_jobs, keys)
    first = geneva_cli("show", str(parent_id), "--children", "--limit", "2")
    table = _children_table(first)
    assert [row.split()[0] for row in table[1:3]] == [str(i) for i in child_ids[:2]]
    assert table[3] == f"… more: --after {child_ids[1]}"
    second = geneva_cli(
        "show",
        str(parent_id),
        "--children",
        "--limit",
        "2",
        "--after",
        str(child_ids[1]),
    )
    table = _children_table(second)
    assert [row.split()[0] for row in table[1:3]] == [str(i) for i in child_ids[2:4]]
    assert table[3] == f"… more: --after {child_ids[3]}"
    last = geneva_cli(
        "show",
        str(parent_id),
        "--children",
        "--limit",
        "2",
        "--after",
        str(child_ids[3]),
    )
    table = _children_table(last)
    assert table == [
        "id class state key step settled",
        f"{child_ids[4]} OpsChild ready part-4 fan_out -",
    ]
    past = geneva_cli(
        "show", str(parent_id), "--children", "--after", str(child_ids[4])
    )
    assert _children_table(past) == [f"(no children after id {child_ids[4]})"]


def test_a_child_shows_its_parent(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: the parent line names the parent (id, class, state), the
    step and execution that started the child, its key, parent_close and how
    it settled."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    fan_out = execution_rows(parent_id)[0]["id"]
    assert _line(geneva_cli("show", str(child_ids[0])), "  parent:") == (
        f"parent: workflow {parent_id} (OpsParent, ready), step fan_out "
        f"(execution {fan_out}), key part-0 (parent_close cancel; not settled)"
    )
    assert _line(geneva_cli("show", str(child_ids[1])), "  parent:").endswith(
        "key part-1 (parent_close cancel; settled failed)"
    )
    # A child that is no parent has no children line.
    assert "children:" not in geneva_cli("show", str(child_ids[0])).stdout


def test_a_parent_that_is_gone_is_said(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60: a child whose parent row was deleted (cleanup) still names it."""
    parent_id, child_ids = build_family(geneva_jobs)
    db.session.execute(
        sa.delete(geneva.StepExecution.__table__).where(
            geneva.StepExecution.__table__.c.workflow_id == parent_id
        )
    )
    db.session.execute(
        sa.delete(geneva.Workflow.__table__).where(
            geneva.Workflow.__table__.c.id == parent_id
        )
    )
    db.session.commit()
    assert _line(geneva_cli("show", str(child_ids[0])), "  parent:").startswith(
        f"parent: workflow {parent_id} (not found: deleted or cleaned up), step fan_out"
    )


def test_a_workflow_without_children(geneva_cli):  # noqa: F811
    """R-CHD-60: a top-level workflow without children prints no family line;
    --children says it has none."""
    workflow = CliOnboarding.create(hero=make_user("solo@example.com"))
    plain = geneva_cli("show", str(workflow.id))
    assert plain.returncode == 0, plain.stderr
    assert "parent:" not in plain.stdout
    assert "children:" not in plain.stdout
    result = geneva_cli("show", str(workflow.id), "--children")
    assert _line(result, "  children:") == "children: none"
    assert "Children:" not in result.stdout


def test_odd_keys_are_quoted_and_escaped(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60, R-CLI-01: a key with whitespace or a quote is JSON-quoted (one
    cell); control characters are shown escaped, never sent to the terminal."""
    keys = ["two words", 'say "hi"', "clear\x1b[2Jscreen", "émoji 🎉", "\u202eevil"]
    parent_id, child_ids = build_family(geneva_jobs, keys)
    result = geneva_cli("show", str(parent_id), "--children")
    assert "\x1b" not in result.stdout
    assert "\u202e" not in result.stdout
    table = _children_table(result)
    assert [row.split(" OpsChild ready ")[1] for row in table[1:]] == [
        '"two words" fan_out -',
        '"say \\"hi\\"" fan_out -',
        "clear\\x1b[2Jscreen fan_out -",
        '"émoji 🎉" fan_out -',
        "\\u202eevil fan_out -",
    ]
    line = _line(geneva_cli("show", str(child_ids[2])), "  parent:")
    assert "key clear\\x1b[2Jscreen (" in line


def test_bad_options_are_one_line_errors(geneva_cli, geneva_jobs):  # noqa: F811
    """R-CHD-60, R-CLI-01: a bad --after id is refused in one line; --limit and
    --after need --children; --limit is 1..1000."""
    parent_id, _ = build_family(geneva_jobs)
    assert_one_line_error(
        geneva_cli("show", str(parent_id), "--children", "--after", "abc"),
        "invalid --after id 'abc'",
    )
    assert_one_line_error(
        geneva_cli("show", str(parent_id), "--children", "--after", "-1"),
        "invalid --after id '-1'",
    )
    for args in (("--limit", "5"), ("--after", "3")):
        result = geneva_cli("show", str(parent_id), *args)
        assert result.returncode == 2
        assert "apply with --children only" in result.stderr
    for limit in ("0", "1001"):
        result = geneva_cli("show", str(parent_id), "--children", "--limit", limit)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr


def test_without_the_unit_nothing_is_read(geneva_cli, without_unit):  # noqa: F811
    """R-CHD-60: without add_child_workflows `show` prints no family line and
    --children says how to install the unit."""
    workflow_id = CliOnboarding.create(hero=make_user("nounit@example.com")).id
    db.session.commit()
    without_unit("add_child_workflows")
    plain = geneva_cli("show", str(workflow_id))
    assert plain.returncode == 0, plain.stderr
    assert "children:" not in plain.stdout
    assert _line(geneva_cli("show", str(workflow_id), "--children"), "  children:") == (
        "children: not in this database (install unit add_child_workflows: "
        "flask geneva install, then flask db upgrade)"
    )
