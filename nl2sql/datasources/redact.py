"""Database error texts without the values in them: a driver's message can quote row values.

DuckDB reports `Overflow in multiplication of INT32 (17 * 2147483647)`, PostgreSQL quotes the
value that failed a cast, SQLite the text it could not convert: any of them may be a value the
asker could not otherwise read. What is shown or stored keeps the message's words and names and
replaces its literals and numbers.

>>> redact_driver_message("Overflow in multiplication of INT32 (17 * 2147483647)!")
'Overflow in multiplication of INT32 (? * ?)!'
>>> redact_driver_message('invalid input syntax for type integer: "Adams"')
'invalid input syntax for type integer: ?'
>>> redact_driver_message("Could not convert string 'luis@example.com' to INT32")
'Could not convert string ? to INT32'
>>> redact_driver_message("no such column: Foo2")
'no such column: Foo2'
"""

from __future__ import annotations

import re

#: Quoted text ('…', "…", «…» with doubled quotes inside), then numbers standing on their own (not part of a
#: name such as INT32 or col_2), dates and times included.
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|«[^»]*»")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d_,:.\-/eE+T]*(?![\w])")
#: Longer messages are cut: what follows is usually the statement echoed back, with its literals.
MAX_CHARS = 300


def redact_driver_message(message: str) -> str:
    """The driver's message with quoted text and numbers replaced by `?` (names and words kept)."""
    text = _QUOTED.sub("?", message)
    text = _NUMBER.sub("?", text)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
