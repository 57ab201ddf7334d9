"""What a name stored in one of geneva's ``String(255)`` columns may be, and
what a queue name may be.

Step names (R-DEF-02), workflow types (R-STI-05), signal names and
idempotency keys (R-WSIG-20, R-WSIG-75) are stored in 255-character columns;
PostgreSQL text cannot hold a NUL character, and no database driver encodes a
str holding an unpaired surrogate (``"\\ud800"``) as UTF-8. One check serves
them all (R-FLT-71). Queue names (the ``queue`` job option,
``GENEVA_DEFAULT_QUEUE``) are stored in JSON and sent to the broker: the same
characters, at most 255 bytes (RabbitMQ's limit).
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_QUEUE_NAME_BYTES",
    "NAME_RULE",
    "QUEUE_NAME_RULE",
    "fits_name_column",
    "is_valid_unicode",
    "queue_name_problem",
]

#: The length of the name columns.
MAX_NAME_LENGTH = 255
#: The rule, as messages state it.
NAME_RULE = (
    f"a non-empty str of at most {MAX_NAME_LENGTH} characters and no NUL "
    "character, in valid Unicode"
)

#: The longest queue name, in bytes of UTF-8: AMQP's short strings (RabbitMQ's
#: queue names) hold at most 255.
MAX_QUEUE_NAME_BYTES = 255
#: The rule of queue names, as messages state it.
QUEUE_NAME_RULE = (
    f"a non-empty str of at most {MAX_QUEUE_NAME_BYTES} bytes of UTF-8 without "
    "NUL characters"
)


def fits_name_column(value: object, *, allow_blank: bool = True) -> TypeGuard[str]:
    """Whether ``value`` can be stored in a name column (see :data:`NAME_RULE`).

    Args:
        value: The name.
        allow_blank: Whether a name of whitespace only counts as non-empty.
    """
    return (
        isinstance(value, str)
        and bool(value if allow_blank else value.strip())
        and len(value) <= MAX_NAME_LENGTH
        and "\x00" not in value
        and is_valid_unicode(value)
    )


def is_valid_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no unpaired surrogate, ``"\\ud800"``)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def queue_name_problem(value: object) -> str | None:
    """Why ``value`` is no queue name (see :data:`QUEUE_NAME_RULE`), or None.

    A queue no broker or database takes would leave its executions
    unpublishable (RabbitMQ refuses a name over 255 bytes, and each dispatcher
    run would stop at it) or fail the insert of its job options deep in the
    driver: refused where it is given, on every database.

    Returns:
        None for a queue name; else a clause for the message, empty when the
        value is no str or an empty one (``": it holds a NUL character"``).
    """
    if not isinstance(value, str) or not value:
        return ""
    if "\x00" in value:
        return ": it holds a NUL character"
    if not is_valid_unicode(value):
        return ": it is not valid Unicode (an unpaired surrogate)"
    size = len(value.encode("utf-8"))
    if size > MAX_QUEUE_NAME_BYTES:
        return f": it is {size} bytes long"
    return None
