"""An exception as message text, `Type: text`, bounded so that no report can balloon."""

from __future__ import annotations

import re

# Long enough for any real traceback summary; a case that raises with megabytes of
# text (a dumped tensor, a log) must not make every report and terminal line that big.
MAX_ERROR_TEXT = 2000
# Terminal styling inside exception text (torch.load's refusal makes a phrase bold):
# it means nothing in a report, and a terminal would show it as `\x1b[1m` escapes.
_TERMINAL_STYLING = re.compile(r"\x1b\[[0-9;]*m")


def error_text(error: BaseException, limit: int = MAX_ERROR_TEXT, *, with_type: bool = True) -> str:
    """`Type: message` (just the message without `with_type`), cut after `limit` characters.

    Exceptions come from user code, so str() itself may raise; the text then
    says so instead of letting a second exception escape the error path.
    """
    try:
        message = without_terminal_styling(str(error))
    except Exception as failure:
        message = f"<str() of the exception raised {type(failure).__name__}>"
    text = f"{type(error).__name__}: {message}" if with_type else message
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters cut)"


def without_terminal_styling(text: str) -> str:
    """`text` without ANSI colour and weight sequences (`\\x1b[1m`, `\\x1b[0m`)."""
    return _TERMINAL_STYLING.sub("", text)
