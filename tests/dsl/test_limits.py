"""Declaring limits: the Limit object, the limit= step option, init_app's checks
and key resolution (SPEC §24.1, R-LIM-01..05).

The init_app tests build their own ``Geneva`` on their own ``SQLAlchemy``, so the
classes they declare never reach the shared test app's registry.
"""

from __future__ import annotations

import pickle
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.limits import Limit
from flask_geneva.dsl.limits import resolve_limit_keys
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import LimitKeyError
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

HERE = Path(__file__).name


def tenant_of(workflow):
    return workflow.tenant


@pytest.fixture
def rates_enabled():
    """Rate limits are accepted (R-LIM-23); kept as a marker of the rate tests."""


# -- R-LIM-01: the object ---------------------------------------------------------


def test_a_limit_keeps_its_settings_and_is_frozen():
    """Limit(name, concurrency=, key=) keeps its settings, is frozen and records
    where it was constructed (R-LIM-01)."""
    limit = Limit("partner-api", concurrency=2, key=tenant_of)
    assert (limit.name, limit.concurrency, limit.key) == ("partner-api", 2, tenant_of)
    assert (limit.rate, limit.per, limit.hold_across_chain) == (None, None, False)
    assert Path(limit.definition_location[0]).name == HERE
    assert limit.where.endswith(f"{HERE}:{limit.definition_location[1]}")
    with pytest.raises(AttributeError):
        limit.concurrency = 3  # type: ignore[misc]
    assert repr(limit) == "Limit('partner-api', concurrency=2, key=tenant_of)"


def test_limits_with_equal_settings_are_equal_and_hash_alike():
    """Equality and hash follow the settings, not where the limit was built;
    a key callable compares by identity (R-LIM-01)."""
    first = Limit("exports", concurrency=5, key="tenant_key")
    second = Limit("exports", concurrency=5, key="tenant_key")
    assert first.definition_location != second.definition_location
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1
    assert first != Limit("exports", concurrency=6, key="tenant_key")
    assert first != Limit("exports", concurrency=5)
    assert first != Limit("other", concurrency=5, key="tenant_key")
    assert Limit("x", concurrency=1, key=tenant_of) == Limit(
        "x", concurrency=1, key=tenant_of
    )
    assert Limit("x", concurrency=1, key=lambda wf: 1) != Limit(
        "x", concurrency=1, key=lambda wf: 1
    )


def test_a_limit_cannot_be_given_its_settings_positionally():
    """Only the name is positional (R-LIM-01)."""
    with pytest.raises(TypeError):
        Limit("x", 2)  # type: ignore[misc]


# -- R-LIM-02: refusals at construction --------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("", "'' (empty)"),
        ("a" * 65, "(65 characters)"),
        ("a\x00b", "(holds a NUL character)"),
        ("partner api", "'partner api' (a character outside the rule)"),
        ("é", "'é' (a character outside the rule)"),
        (7, "7 (int)"),
        (None, "None (NoneType)"),
    ],
    ids=["empty", "too-long", "nul", "space", "non-ascii", "int", "none"],
)
def test_an_invalid_name_is_refused(name, shown):
    """A name that is not 1..64 characters of [A-Za-z0-9_.:-] is refused, naming
    the value and the rule (R-LIM-02)."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit(name, concurrency=1)
    message = str(raised.value)
    assert message.startswith("invalid limit name ")
    assert shown in message
    assert "at most 64 characters, each a letter, digit, '_', '.', ':' or '-'" in (
        message
    )


def test_the_longest_name_and_every_allowed_character_are_accepted():
    """64 characters of letters, digits, '_', '.', ':' and '-' make a name (R-LIM-02)."""
    assert Limit("a" * 64, concurrency=1).name == "a" * 64
    assert Limit("Az09_.:-", concurrency=1).name == "Az09_.:-"


def test_a_limit_without_concurrency_or_rate_is_refused():
    """Neither concurrency nor rate is refused, naming both ways (R-LIM-02);
    a lone per names the missing rate."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit("partner-api")
    assert str(raised.value) == (
        "Limit 'partner-api': declares neither concurrency nor rate: give "
        "concurrency=<a positive int> (at most that many at once per key), or "
        "rate=<starts> and per=<a timedelta> (at most that many starts in any "
        "window)"
    )
    with pytest.raises(StepConfigurationError) as raised:
        Limit("partner-api", per=timedelta(seconds=1))
    assert "per=datetime.timedelta(seconds=1) without rate" in str(raised.value)


@pytest.mark.parametrize("option", ["concurrency", "rate"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0 (int)"), (-1, "-1 (int)"), (True, "True (bool)"), (2.0, "2.0 (float)")],
    ids=["zero", "negative", "bool", "float"],
)
def test_a_count_that_is_not_a_positive_int_is_refused(
    rates_enabled, option, value, shown
):
    """concurrency and rate must be positive ints; bools are refused (R-LIM-02, R-JOB-05)."""
    extra = {"per": timedelta(minutes=1)} if option == "rate" else {}
    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", **{option: value}, **extra)
    assert str(raised.value) == (
        f"Limit 'x': invalid {option} {shown}: must be a positive int (not a "
        "bool), or None"
    )


def test_rate_without_per_and_per_without_rate_are_refused(rates_enabled):
    """rate and per come together (R-LIM-02)."""
    with pytest.raises(StepConfigurationError, match=r"rate=5 without per: give"):
        Limit("x", rate=5)
    with pytest.raises(StepConfigurationError, match=r"without rate: give the number"):
        Limit("x", concurrency=1, per=timedelta(minutes=1))


@pytest.mark.parametrize(
    ("per", "shown"),
    [
        (timedelta(0), "datetime.timedelta(0) (timedelta)"),
        (timedelta(seconds=-1), "(timedelta)"),
        (timedelta(days=31, seconds=1), "(timedelta)"),
        (60, "60 (int)"),
    ],
    ids=["zero", "negative", "over-31-days", "seconds"],
)
def test_a_per_that_is_not_a_positive_timedelta_up_to_31_days_is_refused(
    rates_enabled, per, shown
):
    """per is a positive timedelta of at most 31 days (R-LIM-02)."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", rate=5, per=per)
    message = str(raised.value)
    assert message.startswith("Limit 'x': invalid per ")
    assert shown in message
    assert message.endswith("must be a positive timedelta of at most 31 days")


def test_a_rate_over_ten_thousand_is_refused_with_a_shorter_per_suggested(
    rates_enabled,
):
    """rate > 10,000 is refused; the message suggests a shorter per (R-LIM-02)."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", rate=10_001, per=timedelta(minutes=1))
    message = str(raised.value)
    assert "invalid rate 10001: at most 10,000 starts per window" in message
    assert "use a shorter per" in message
    limit = Limit("x", rate=10_000, per=timedelta(days=31))
    assert (limit.rate, limit.per) == (10_000, timedelta(days=31))


def test_a_rate_limit_is_accepted_with_or_without_concurrency():
    """A valid rate/per is a limit of its own or beside a concurrency (R-LIM-02,
    R-LIM-23)."""
    for settings in (
        {"rate": 100, "per": timedelta(minutes=1)},
        {"concurrency": 2, "rate": 100, "per": timedelta(minutes=1)},
    ):
        limit = Limit("partner-api", **settings)
        assert limit.rate == 100
        assert limit.per == timedelta(minutes=1)
        assert limit.concurrency == settings.get("concurrency")


def test_an_invalid_rate_is_named():
    """An invalid rate is named as invalid (R-LIM-02)."""
    with pytest.raises(StepConfigurationError, match=r"invalid rate 0 \(int\)"):
        Limit("x", rate=0, per=timedelta(minutes=1))


def test_hold_across_chain_must_be_a_bool():
    """hold_across_chain is a bool (R-LIM-02, R-LIM-26)."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", concurrency=1, hold_across_chain=1)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "Limit 'x': invalid hold_across_chain 1 (int): must be True or False"
    )
    assert Limit("x", concurrency=1, hold_across_chain=True).hold_across_chain


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (3, "invalid key 3 (int): must be None (one global key), the name of a "),
        (
            ["tenant"],
            "invalid key ['tenant'] (list): must be None (one global key), the name",
        ),
        (dict, "invalid key <class 'dict'> (type): must be None"),
        ("tenant key", "invalid key 'tenant key': a method name must be an identifier"),
    ],
    ids=["int", "list", "class", "not-identifier"],
)
def test_a_key_that_is_not_none_a_method_name_or_a_callable_is_refused(key, expected):
    """key is None, a method name or a callable (R-LIM-02)."""
    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", concurrency=1, key=key)
    assert expected in str(raised.value)


def test_an_async_key_callable_is_refused_like_an_async_body():
    """An async key function is refused with the R-DEF-19 reason (R-LIM-02)."""

    async def tenant(workflow):
        return "acme"

    with pytest.raises(StepConfigurationError) as raised:
        Limit("x", concurrency=1, key=tenant)
    message = str(raised.value)
    assert message.startswith("Limit 'x': key tenant is an async function")
    assert message.endswith("use a plain def (R-DEF-19)")


def test_a_key_callable_of_the_wrong_shape_or_unhashable_is_refused():
    """A key that cannot be called as (workflow), or is unhashable, is refused (R-LIM-02)."""
    with pytest.raises(StepConfigurationError, match=r"must be callable with the"):
        Limit("x", concurrency=1, key=lambda: "acme")

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, workflow):
            return "acme"

    with pytest.raises(StepConfigurationError, match="is not hashable"):
        Limit("x", concurrency=1, key=Unhashable())


# -- R-LIM-03: the step option -------------------------------------------------------


partner_api = Limit("partner-api", concurrency=2, key=tenant_of)
exports = Limit("exports", concurrency=5)


def steps_of(cls):
    return cls.__geneva_definitions__.steps


def test_every_step_declaration_takes_a_limit_or_a_list_of_limits():
    """@step, @resumable_step, step.anonymous and step.repeat take limit=; the
    definition keeps the limits in order, () without (R-LIM-03)."""

    class Limited(Workflow):
        @step(limit=partner_api)
        def push(self):
            pass

        @step(limit=[exports, partner_api])
        def export(self):
            pass

        @resumable_step(limit=(partner_api,))
        def chunks(self, it):
            pass

        inline = step.anonymous(lambda wf: None, name="inline", limit=exports)
        repeated = step.repeat(2, "push", limit=[partner_api])

        @step(wait_for="approved", limit=exports)
        def gated(self):
            pass

        @step(limit=[])
        def empty(self):
            pass

        @step
        def plain(self):
            pass

    steps = steps_of(Limited)
    assert steps.named("push").limits == (partner_api,)
    assert steps.named("export").limits == (exports, partner_api)
    assert steps.named("chunks").limits == (partner_api,)
    assert steps.named("inline").limits == (exports,)
    assert [d.limits for d in steps if d.name.startswith("step_")] == [
        (partner_api,),
        (partner_api,),
    ]
    assert steps.named("gated").limits == (exports,)
    assert steps.named("empty").limits == ()
    assert steps.named("plain").limits == ()


def test_a_limit_name_instead_of_the_limit_is_refused_with_the_hint():
    """limit='partner-api' says: pass the Limit object, not its name (R-LIM-03)."""
    with pytest.raises(StepConfigurationError) as raised:

        class ByName(Workflow):
            @step(limit="partner-api")
            def push(self):
                pass

    message = str(raised.value)
    assert message.startswith(
        "Step 'push': invalid limit 'partner-api' (str): must be a Limit, a list of "
        "Limits, or None"
    )
    assert "pass the Limit object, not its name" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"name": "partner-api", "concurrency": 2},
            "(dict): must be a Limit, a list of Limits, or None; build it with "
            "Limit(name, concurrency=...) instead of a dict",
        ),
        (2, "invalid limit 2 (int): must be a Limit"),
        (
            [partner_api, "exports"],
            "invalid limit 'exports' (str) in limit=[",
        ),
        ({partner_api}, "(set): must be a Limit, a list of Limits, or None"),
    ],
    ids=["dict", "int", "str-in-list", "set"],
)
def test_a_limit_option_of_another_kind_is_refused(value, expected):
    """A dict, a number, a set, or a list with a non-Limit is refused (R-LIM-03)."""
    with pytest.raises(StepConfigurationError) as raised:
        step.anonymous(lambda wf: None, name="push", limit=value)
    assert expected in str(raised.value)


def test_a_str_in_a_list_gets_the_hint_too():
    """limit=[partner_api, 'exports'] names the str element and the hint (R-LIM-03)."""
    with pytest.raises(StepConfigurationError, match="not its name"):
        step.repeat(1, "push", limit=[partner_api, "exports"])


def test_two_limits_of_one_name_on_a_step_are_refused():
    """The limits of a step have distinct names, even equal ones (R-LIM-03)."""
    other = Limit("partner-api", concurrency=9)
    for value in ([partner_api, partner_api], (partner_api, exports, other)):
        with pytest.raises(StepConfigurationError) as raised:
            step.anonymous(lambda wf: None, name="push", limit=value)
        assert "names 'partner-api' more than once: give each limit once" in str(
            raised.value
        )


def test_a_misspelt_limit_option_or_a_limit_setting_on_the_step_is_named():
    """The unknown-keyword message knows limit, and a Limit setting on the step
    says where it belongs (R-LIM-03, R-DEF-23)."""
    with pytest.raises(StepConfigurationError) as raised:
        step(limits=partner_api)  # type: ignore[call-overload]
    message = str(raised.value)
    assert "@step: unknown option 'limits' (did you mean 'limit'?)" in message
    assert "job_options, limit, max_reattempts" in message
    with pytest.raises(StepConfigurationError) as raised:
        step.anonymous(lambda wf: None, concurrency=2)
    assert (
        "'concurrency' (concurrency is a setting of Limit: declare partner_api = "
        "Limit('partner-api', concurrency=...) and pass limit=partner_api)"
    ) in str(raised.value)


# -- R-LIM-05: key resolution --------------------------------------------------------


def _step(*limits):
    class Keyed(Workflow):
        @step(limit=list(limits))
        def push(self):
            pass

    return Keyed, steps_of(Keyed).named("push")


class Tenant:
    def __init__(self, tenant):
        self.tenant = tenant

    def tenant_key(self):
        return self.tenant


def test_keys_come_from_a_callable_a_method_or_the_global_key_sorted_by_name():
    """key(workflow), getattr(workflow, key)() and '' for None, sorted by (name,
    key) (R-LIM-05)."""
    by_method = Limit("b-method", concurrency=1, key="tenant_key")
    by_function = Limit("c-function", concurrency=1, key=tenant_of)
    everyone = Limit("a-global", concurrency=1)
    _, definition = _step(by_function, by_method, everyone)
    assert resolve_limit_keys(Tenant("acme"), definition) == [
        ("a-global", ""),
        ("b-method", "acme"),
        ("c-function", "acme"),
    ]
    _, unlimited = _step()
    assert resolve_limit_keys(Tenant("acme"), unlimited) == []


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("acme", "acme"),
        (42, "42"),
        (-7, "-7"),
        (
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "12345678-1234-5678-1234-567812345678",
        ),
        ("k" * 255, "k" * 255),
    ],
    ids=["str", "int", "negative-int", "uuid", "255-characters"],
)
def test_a_str_int_or_uuid_key_is_used_as_its_text(value, key):
    """The value is a str, int or UUID, stored as str(value) (R-LIM-05)."""
    _, definition = _step(partner_api)
    assert resolve_limit_keys(Tenant(value), definition) == [("partner-api", key)]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "returned True (bool): a key must be a str, an int (not a bool)"),
        (None, "returned None (NoneType): a key must be"),
        (["acme"], "returned ['acme'] (list): a key must be"),
        ({"id": 1}, "returned {'id': 1} (dict): a key must be"),
        (1.5, "returned 1.5 (float): a key must be"),
        ("", "returned '': a key must be"),
        ("a\x00b", "returned 'a\\x00b': a key must be"),
        ("k" * 256, "kkk... (256 characters): a key must be"),
        (10**300, "... (301 characters): a key must be"),
    ],
    ids=[
        "bool",
        "none",
        "unhashable-list",
        "dict",
        "float",
        "empty",
        "nul",
        "oversized-str",
        "oversized-int",
    ],
)
def test_a_key_value_outside_the_rule_raises_limit_key_error(value, shown):
    """Another type, an empty, oversized or NUL-holding text raises LimitKeyError
    naming the limit, the step and the value (R-LIM-05)."""
    _, definition = _step(partner_api)
    with pytest.raises(LimitKeyError) as raised:
        resolve_limit_keys(Tenant(value), definition)
    error = raised.value
    message = str(error)
    assert message.startswith("limit 'partner-api' of step 'push': its key tenant_of ")
    assert shown in message
    assert "at most 255 characters long and holds no NUL character" in message
    assert (error.limit_name, error.step_name) == ("partner-api", "push")
    assert isinstance(error, GenevaError)


def test_a_long_bad_value_is_cut_to_about_80_characters():
    """The value's repr in the message is cut to 80 characters (R-LIM-05)."""
    _, definition = _step(partner_api)
    with pytest.raises(LimitKeyError) as raised:
        resolve_limit_keys(Tenant(list(range(1000))), definition)
    message = str(raised.value)
    shown = message.partition("returned ")[2].partition(" (list)")[0]
    assert len(shown) == 80
    assert shown.endswith("...")


def test_a_key_function_or_method_that_raises_raises_limit_key_error_chained():
    """A key that raises raises LimitKeyError chained from its error, naming the
    error (R-LIM-05)."""

    def broken(workflow):
        raise ValueError("no tenant yet")

    _, definition = _step(Limit("partner-api", concurrency=2, key=broken))
    with pytest.raises(LimitKeyError) as raised:
        resolve_limit_keys(Tenant("acme"), definition)
    assert str(raised.value) == (
        "limit 'partner-api' of step 'push': its key broken raised ValueError: "
        "'no tenant yet'"
    )
    assert isinstance(raised.value.__cause__, ValueError)

    _, definition = _step(Limit("exports", concurrency=1, key="missing_method"))
    with pytest.raises(LimitKeyError) as raised:
        resolve_limit_keys(Tenant("acme"), definition)
    assert str(raised.value).startswith(
        "limit 'exports' of step 'push': its key method 'missing_method' raised "
        "AttributeError: "
    )
    assert isinstance(raised.value.__cause__, AttributeError)


def test_limit_key_error_survives_pickling():
    """LimitKeyError keeps its message, limit and step through pickle (R-LIM-05)."""
    error = LimitKeyError("bad key", limit_name="partner-api", step_name="push")
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (str(copy), copy.limit_name, copy.step_name) == (
        "bad key",
        "partner-api",
        "push",
    )


# -- R-LIM-04: init_app ---------------------------------------------------------------


@pytest.fixture
def geneva():
    return Geneva(SQLAlchemy())


def _init(geneva, tmp_path):
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'limits.sqlite3'}",
        GENEVA_TASK_BACKEND="recording",
    )
    geneva.db.init_app(app)
    geneva.init_app(app)
    return app


def test_geneva_limits_lists_the_registered_limits_by_name(geneva, tmp_path):
    """geneva.limits is {name: Limit} of the registered classes, sorted, read-only;
    a limit shared by classes is listed once (R-LIM-04)."""
    assert dict(geneva.limits) == {}

    class Sync(geneva.Workflow):
        @step(limit=[partner_api, exports])
        def push(self):
            pass

    class Export(geneva.Workflow):
        @step(limit=Limit("exports", concurrency=5))
        def run(self):
            pass

    _init(geneva, tmp_path)
    assert list(geneva.limits) == ["exports", "partner-api"]
    assert geneva.limits["partner-api"] is partner_api
    assert geneva.limits["exports"] == exports
    with pytest.raises(TypeError):
        geneva.limits["x"] = exports  # type: ignore[index]
    with pytest.raises(AttributeError):
        geneva.limits = {}  # type: ignore[misc]


def test_two_different_limits_of_one_name_are_refused_at_init_app(geneva, tmp_path):
    """One line per conflicting name, naming both declarations and a step using
    each (R-LIM-04)."""
    narrow = Limit("partner-api", concurrency=1, key=tenant_of)
    wide = Limit("partner-api", concurrency=3, key=tenant_of)
    other_exports = Limit("exports", concurrency=6)

    class Sync(geneva.Workflow):
        @step(limit=[narrow, exports])
        def push(self):
            pass

    class Backfill(geneva.Workflow):
        @step(limit=[wide, other_exports])
        def run(self):
            pass

    with pytest.raises(GenevaConfigurationError) as raised:
        _init(geneva, tmp_path)
    sync, backfill = Sync.__geneva_type__, Backfill.__geneva_type__
    lines = str(raised.value).splitlines()
    assert lines[0] == "2 problem(s) found when flask_geneva started:"
    assert lines[1] == (
        f"  1. limit 'exports' is declared with different settings: "
        f"Limit('exports', concurrency=5) at {exports.where} (step {sync}.push) "
        f"and Limit('exports', concurrency=6) at {other_exports.where} (step "
        f"{backfill}.run); a name has one setting: share one Limit object, or give "
        "the other limit its own name"
    )
    assert lines[2].startswith("  2. limit 'partner-api' is declared with different")
    assert (
        f"concurrency=1, key=tenant_of) at {narrow.where} (step {sync}.push)"
        in (lines[2])
    )
    assert (
        f"concurrency=3, key=tenant_of) at {wide.where} (step {backfill}.run)"
        in lines[2]
    )


def test_equal_limits_declared_twice_are_not_a_conflict(geneva, tmp_path):
    """Two Limit objects with equal settings may share a name (R-LIM-04)."""

    class Sync(geneva.Workflow):
        @step(limit=Limit("exports", concurrency=5))
        def push(self):
            pass

    class Export(geneva.Workflow):
        @step(limit=Limit("exports", concurrency=5))
        def run(self):
            pass

    _init(geneva, tmp_path)
    assert list(geneva.limits) == ["exports"]


def test_limits_that_differ_only_in_their_key_functions_say_so(geneva, tmp_path):
    """Two lambdas print alike but are different objects: the conflict says
    that is the difference (R-LIM-04, R-LIM-01)."""

    class Sync(geneva.Workflow):
        @step(limit=Limit("tenant-api", concurrency=2, key=lambda wf: wf.tenant))
        def push(self):
            pass

    class Export(geneva.Workflow):
        @step(limit=Limit("tenant-api", concurrency=2, key=lambda wf: wf.tenant))
        def run(self):
            pass

    with pytest.raises(GenevaConfigurationError) as raised:
        _init(geneva, tmp_path)
    assert (
        "(they differ only in their key functions, which are different objects)"
        in str(raised.value)
    )


def test_a_key_method_the_class_lacks_is_refused_at_init_app(geneva, tmp_path):
    """key='no_such_method', an async key method or a non-callable attribute is
    refused at init_app, naming class, step and limit (R-LIM-04, R-CFG-03)."""

    class Sync(geneva.Workflow):
        not_callable = "acme"

        @step(limit=Limit("a", concurrency=1, key="tenant_key"))
        def first(self):
            pass

        @step(limit=Limit("b", concurrency=1, key="async_key"))
        def second(self):
            pass

        @step(limit=Limit("c", concurrency=1, key="not_callable"))
        def third(self):
            pass

        @step(limit=Limit("d", concurrency=1, key="good_key"))
        def fourth(self):
            pass

        async def async_key(self):
            return "acme"

        def good_key(self):
            return "acme"

    with pytest.raises(GenevaConfigurationError) as raised:
        _init(geneva, tmp_path)
    label, name = Sync.__geneva_type__, Sync.__qualname__
    lines = str(raised.value).splitlines()
    assert lines[0] == "3 problem(s) found when flask_geneva started:"
    assert lines[1] == (
        f"  1. {label}: step 'first': limit 'a': key='tenant_key' names no "
        f"attribute of {name}; define a method tenant_key(self) returning the key, "
        "or fix the name"
    )
    assert lines[2].startswith(
        f"  2. {label}: step 'second': limit 'b': key='async_key': key "
        "Sync.async_key is an async function"
    )
    assert lines[3] == (
        f"  3. {label}: step 'third': limit 'c': key='not_callable' is not a method "
        f"of {name} (str); the key is called as workflow.not_callable()"
    )
