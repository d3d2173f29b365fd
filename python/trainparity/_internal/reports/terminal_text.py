"""Text for a terminal: control characters in recorded data are shown escaped, never obeyed.

State keys, file paths and messages come from the user's files; printed raw,
an ESC sequence could clear the screen or recolour a verdict, and a newline or
carriage return could forge a line such as `PASS: ...`. Every line the CLI,
the progress printer and result reprs show passes through `printable`. JSON
reports are left alone: they hold the data exactly (JSON escapes controls).
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 controls, DEL and C1 controls (all of Unicode category Cc), plus the characters
# that move text without being controls: line/paragraph separators and bidi overrides.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    character = match.group()
    if character in _NAMED:
        return _NAMED[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`str(text)` with every control character written as an escape (`\\n`, `\\x1b`, `\\u202e`).

    Ordinary Unicode (accents, CJK, emoji) is kept; backslashes are not
    doubled, so text without control characters is returned unchanged.
    """
    return _UNSAFE.sub(_escaped, str(text))
