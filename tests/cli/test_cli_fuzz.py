"""Every ``flask geneva`` command fuzzed with arguments and option values of any
kind, in-process (issue 41, R-FLT-70, R-FLT-71, R-CLI-01/02).

The command lines are drawn from the commands' own parameters (Click's
introspection: every command of the group but ``worker``, which starts a
worker, and ``install``, which writes files), mixing valid ids, step and signal
names with text of any kind. Each runs through Flask's CLI runner
(``geneva_cli``, which re-raises any exception that is not an exit status):
the exit status is 0, 1 (a refusal, one or more lines on stderr) or 2 (a usage
error with its ``Error:`` line, and every table as it was); never a traceback.
The failing inputs fuzzing found are kept as explicit examples.
"""

from __future__ import annotations

import itertools

import click
from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva.cli import geneva_group
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.cli_app import CliAwaiting
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.fuzzing import with_fixtures
from tests.support.refusals import table_snapshot
from tests.support.workflow import make_user

_EMAILS = itertools.count()
#: Commands not run: one starts a Celery worker, the other writes files.
NOT_RUN = {"worker", "install"}
#: The workflow's id in a generated command line.
ID = "<id>"


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in sorted(geneva_group.commands.items()):
        if name in NOT_RUN:
            continue
        if isinstance(command, click.Group):
            found += [
                ((name, sub), cmd) for sub, cmd in sorted(command.commands.items())
            ]
        else:
            found.append(((name,), command))
    return found


COMMANDS = _commands()
TOKENS = st.one_of(
    st.text(max_size=12),
    st.integers(-3, 3).map(str),
    st.sampled_from(
        [
            ID,
            ID,
            "0",
            "-1",
            "99999999999999999999",
            "",
            "\x00",
            "\ud800",
            "--",
            "User#1",
            "welcome",
            "follow_up",
            "paid",
            "{}",
            "null",
            '"\\ud800"',
            "[" * 300,
            "1.5",
            "nan",
            "\u0663",
            "* * * * *",
            "x" * 300,
        ]
    ),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A command of the group, then up to three tokens or its own options."""
    path, command = draw(st.sampled_from(COMMANDS))
    options = [
        (name, param.is_flag)
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
        if name.startswith("--")
    ]
    line = list(path)
    for _ in range(draw(st.integers(0, 3))):
        if options and draw(st.booleans()):
            name, is_flag = draw(st.sampled_from(options))
            line += [name] if is_flag else [name, draw(TOKENS)]
        else:
            line.append(draw(TOKENS))
    return line


def _workflow(kind: str):
    hero = make_user(f"cli-fuzz-{next(_EMAILS)}@example.com")
    if kind == "awaiting":
        workflow = CliAwaiting.create(hero=hero)
        perform_next_step(workflow)
    else:
        workflow = CliOnboarding.create(hero=hero)
        if kind == "paused":
            workflow.pause()
    db.session.commit()
    return workflow


@with_fixtures(max_examples=30)
@given(line=command_lines(), kind=st.sampled_from(["ready", "awaiting", "paused"]))
@example(line=["list", "--class", "\ud800"], kind="ready").via(
    "UnicodeEncodeError in the driver (issue 41)"
)
@example(line=["list", "--hero", "\ud800#1"], kind="ready").via(
    "UnicodeEncodeError in the driver (issue 41)"
)
@example(line=["signal", ID, "\ud800"], kind="awaiting").via(
    "UnicodeEncodeError in the driver (issue 41)"
)
def test_every_command_refuses_bad_arguments_clearly(
    geneva_cli,  # noqa: F811
    line,
    kind,
):
    """A fuzzed command line: done (exit 0), refused (exit 1, a message on stderr) or a usage error (exit 2, an Error: line, nothing changed); never a traceback (R-FLT-70, R-CLI-01/02, R-FLT-71)."""
    workflow = _workflow(kind)
    args = [str(workflow.id) if token == ID else token for token in line]
    before = table_snapshot()
    result = geneva_cli(*args)
    assert result.returncode in (0, 1, 2), (args, result)
    assert "Traceback" not in result.stderr, (args, result.stderr)
    if result.returncode == 1:
        assert result.stderr.strip(), (args, result)
    if result.returncode == 2:
        assert table_snapshot() == before, args
        errors = [
            line for line in result.stderr.splitlines() if line.startswith("Error:")
        ]
        assert len(errors) == 1, (args, result.stderr)


def test_list_refuses_an_unpaired_surrogate_naming_the_option(geneva_cli):  # noqa: F811
    """--class or --hero text holding an unpaired surrogate is an error naming the option, as a NUL character is, not a UnicodeEncodeError of the driver (R-FLT-71, R-CLI-01)."""
    _workflow("ready")
    for args, option in (
        (("--class", "Cli\ud800"), "--class"),
        (("--hero", "Us\ud800er#1"), "--hero"),
    ):
        result = geneva_cli("list", *args)
        assert result.returncode == 1, result
        [error] = [line for line in result.stderr.splitlines() if line.strip()]
        assert error.startswith(f"Error: {option} must be valid Unicode"), error
        assert "'Cli\\ud800'" in error or "'Us\\ud800er'" in error, error
