"""What a name stored in one of geneva's ``String(255)`` columns may be.

Step names (R-DEF-02), workflow types (R-STI-05), signal names and
idempotency keys (R-WSIG-20, R-WSIG-75) are stored in 255-character columns,
and PostgreSQL text cannot hold a NUL character. One check serves them all.
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["MAX_NAME_LENGTH", "NAME_RULE", "fits_name_column"]

#: The length of the name columns.
MAX_NAME_LENGTH = 255
#: The rule, as messages state it.
NAME_RULE = (
    f"a non-empty str of at most {MAX_NAME_LENGTH} characters and no NUL character"
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
    )
