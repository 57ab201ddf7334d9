"""The documentation's generated reference matches the code (settings, CLI, spec rule ids).

The docs build (``mkdocs build --strict`` in .ci/run) puts these texts into the
pages; these tests check the texts themselves against ``DEFAULTS``, the Click
group and the rule ids the code cites, so that neither can drift.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import tomllib
from pathlib import Path

import click
import pytest

from flask_geneva.cli import geneva_group
from flask_geneva.cli.reference import cli_reference
from flask_geneva.cli.reference import format_default
from flask_geneva.cli.reference import settings_reference
from flask_geneva.core.config import DEFAULTS
from flask_geneva.core.config import SETTING_DESCRIPTIONS

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location(
        "geneva_docs_hooks", DOCS / "hooks.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rendered(page: str) -> str:
    source = (DOCS / page).read_text(encoding="utf-8")
    return _hooks().on_page_markdown(source, page=None, config=None, files=None)


def _cell(text: str) -> str:
    """Text as a Markdown table cell holds it (one line, pipes escaped)."""
    return " ".join(text.split()).replace("|", "\\|")


def test_every_setting_has_a_meaning():
    """Each key of DEFAULTS has a description and no description names an unknown key (R-CFG-01)."""
    assert set(SETTING_DESCRIPTIONS) == set(DEFAULTS)
    assert all(text.strip() for text in SETTING_DESCRIPTIONS.values())


def test_settings_page_lists_every_setting_with_default_and_meaning():
    """The built settings page has one row per GENEVA_* setting, in DEFAULTS order, with its default and meaning."""
    page = _rendered("reference/settings.md")
    rows = re.findall(r"^\| `(GENEVA_[A-Z_]+)` \| `([^`]*)` \| (.*) \|$", page, re.M)
    assert [row[0] for row in rows] == list(DEFAULTS)
    for key, default, meaning in rows:
        assert default == format_default(DEFAULTS[key])
        assert meaning == _cell(SETTING_DESCRIPTIONS[key])
    assert "(not described yet)" not in settings_reference()


def test_format_default_writes_durations_in_whole_units():
    """Durations read as people write them; the testing sentinel as its rule (R-TXN-01)."""
    assert format_default(DEFAULTS["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"]) == (
        "30 days"
    )
    assert format_default(DEFAULTS["GENEVA_STUCK_IN_PROGRESS_THRESHOLD"]) == "1 hour"
    assert format_default(DEFAULTS["GENEVA_DISPATCH_INTERVAL"]) == "30 seconds"
    assert format_default(DEFAULTS["GENEVA_WORKER_DEAD_AFTER"]) == "1 minute"
    assert format_default(DEFAULTS["GENEVA_ENQUEUE_AFTER_COMMIT"]) == (
        "not app.testing"
    )
    assert format_default(DEFAULTS["GENEVA_TASK_BACKEND"]) == "'celery'"


def test_cli_page_describes_every_command_and_option():
    """The built CLI page has a section per `flask geneva` command with every option and its help (R-CLI-01)."""
    page = _rendered("reference/cli.md")
    sections = re.split(r"^### ", page, flags=re.M)[1:]
    titles = [section.split("\n", 1)[0] for section in sections]
    assert titles == [
        f"`flask geneva {name}`" for name in sorted(geneva_group.commands)
    ]
    for name, section in zip(sorted(geneva_group.commands), sections, strict=True):
        command = geneva_group.commands[name]
        first_line = (command.help or "").strip().splitlines()[0]
        assert first_line in section
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    assert f"`{opt}`" in section, (name, opt)
                if param.help:
                    assert _cell(param.help) in section, (name, opt)
            else:
                assert param.human_readable_name in section, (name, param.name)
    assert cli_reference() in page


def test_every_rule_id_the_code_cites_is_defined_in_the_spec():
    """Each R-... id cited in flask_geneva/ and tests/ is a rule of docs/spec.md, the spec of record."""
    defined = set(
        re.findall(r"^- (R-[A-Z]+-\d+)", (DOCS / "spec.md").read_text("utf-8"), re.M)
    )
    cited: dict[str, str] = {}
    for folder in ("flask_geneva", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for rule in re.findall(r"R-[A-Z]+-\d+", path.read_text("utf-8")):
                cited.setdefault(rule, str(path.relative_to(ROOT)))
    missing = {rule: where for rule, where in cited.items() if rule not in defined}
    assert len(cited) > 300
    assert missing == {}


def test_inline_enqueue_is_documented_with_its_visibility_warning():
    """The API reference page and the README warn that inside inline_enqueue() a worker can pick a task before its row is visible (R-TXN-07)."""
    import flask_geneva

    assert "::: flask_geneva.inline_enqueue" in (
        DOCS / "reference" / "api.md"
    ).read_text("utf-8")
    docstring = inspect.getdoc(flask_geneva.inline_enqueue) or ""
    warning = " ".join(docstring.partition("Warning:")[2].split())
    assert "the broker does not take part in the database transaction" in warning
    assert "a worker may receive the task before the row is committed" in warning
    assert "(R-JOB-20)" in warning
    readme = " ".join((ROOT / "README.md").read_text("utf-8").split())
    assert (
        "`inline_enqueue()` publishes immediately (a worker may then see the task "
        "before the row is visible)"
    ) in readme


#: A repository path the README or a docs page names: a top-level folder of the
#: project, then a file name with its extension.
_NAMED_PATH = re.compile(
    r"(?<![\w/.-])((?:flask_geneva|bench|tests|example_app|docs|\.ci)/[\w/.-]*\w\.\w+)"
)
#: A dotted name under the package written as code (`flask_geneva.x.y`).
_NAMED_DOTTED = re.compile(r"`(flask_geneva(?:\.\w+)+)`")


def _documentation_texts() -> dict[str, str]:
    """The README and every Markdown page under docs/, by path from the root."""
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return {str(page.relative_to(ROOT)): page.read_text("utf-8") for page in pages}


def _names_that_are_not_python() -> set[str]:
    """Celery tasks' names and the package's entry point groups."""
    from flask_geneva.core import publications
    from flask_geneva.ext import tasks

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return {
        publications.PERFORM_STEP_TASK,
        publications.DISPATCH_DUE_TASK,
        tasks.HOUSEKEEPING_TASK,
        *project["entry-points"],
    }


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module or an attribute of one where it now lives.

    An old flat module name of the layout change (a shim that warns when
    imported, ``flask_geneva.core.moved_modules``) fails the test: the
    pytest configuration turns the ``DeprecationWarning`` into an error.
    """
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            found = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:  # a name inside a module, not a submodule
            found = None
        if found is None:
            continue
        value: object = importlib.import_module(module_name)
        for attribute in parts[split:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def test_every_file_and_module_the_docs_name_exists():
    """A path (`flask_geneva/db/row_updates.py`) or dotted name (`flask_geneva.db.locks`) in the README or docs/ names what is there, so no move of the package layout leaves a stale pointer."""
    named_paths: dict[str, str] = {}
    named_dotted: dict[str, str] = {}
    for page, text in _documentation_texts().items():
        for path in _NAMED_PATH.findall(text):
            named_paths.setdefault(path, page)
        for dotted in _NAMED_DOTTED.findall(text):
            named_dotted.setdefault(dotted, page)
    assert len(named_paths) > 20
    assert len(named_dotted) > 20
    missing_paths = {
        p: page for p, page in named_paths.items() if not (ROOT / p).exists()
    }
    not_python = _names_that_are_not_python()
    missing_dotted = {
        d: page
        for d, page in named_dotted.items()
        if d not in not_python and not _resolves(d)
    }
    assert missing_paths == {}
    assert missing_dotted == {}
