"""``flask geneva limits`` with odd names and keys (R-LIM-40, R-CLI-01): a
usage error for any unknown name, control characters never printed raw, a
key differing only by a trailing space or an emoji told apart.
"""

from __future__ import annotations

import pytest

from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.cli.test_limits_command import CliPartnerSync  # noqa: F401 - declares it
from tests.support.limit_rows import set_key


@pytest.mark.parametrize(
    "name",
    [
        "x" * 5000,
        "\N{RED APPLE}",
        "' or 1=1 --",
        "evil\x1b[31m",
        "%",
        "cli-partner-api ",
    ],
)
def test_an_odd_unknown_name_is_a_usage_error(geneva_cli, geneva_jobs, name):  # noqa: F811
    """R-LIM-40: exit status 2, no traceback, no raw escape sequence."""
    result = geneva_cli("limits", name)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr + result.stdout
    assert "unknown limit" in result.stderr


def test_keys_told_apart_by_a_space_or_an_emoji(geneva_cli, geneva_jobs):  # noqa: F811
    """R-LIM-40: "a" and "a " are two lines, the second quoted; two emoji are
    two keys (R-LIM-05)."""
    for key in ("a", "a ", "\N{RED APPLE}", "\N{BANANA}"):
        set_key("cli-partner-api", key, running=1)
    result = geneva_cli("limits", "cli-partner-api")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("key=a " in line for line in lines)
    assert any('key="a "' in line for line in lines)
    assert any("\N{RED APPLE}" in line for line in lines)
    assert any("\N{BANANA}" in line for line in lines)
