"""What every fuzz input must end as, checked the same way by every fuzzer."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from trainparity._internal.cli.main import main
from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.text_views import text_report
from trainparity.outcomes import Outcome

# Raw control characters that must never reach a terminal (see terminal_text.py).
_RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def assert_terminal_safe(text: str) -> None:
    match = _RAW_CONTROL.search(text)
    assert match is None, f"raw {match.group()!r} in terminal text: {text[:500]!r}"


def assert_well_formed_result(result: Any) -> dict[str, Any]:
    """A result object whose report serialises and renders as text, HTML and repr."""
    assert result.outcome in tuple(Outcome), result
    report = result.to_dict()
    json.dumps(report)
    assert_terminal_safe(text_report(report))
    html_fragment(report)
    assert_terminal_safe(repr(result))
    return report


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """`trainparity._internal.cli.main(argv)` with stdout and stderr captured; returns (code, out, err).

    Only SystemExit's own codes may leave main as documented (0-4): any other
    exception propagates and fails the fuzzer.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code in (0, 1, 2, 3, 4), (argv, code, err.getvalue()[-2000:])
    assert_terminal_safe(out.getvalue())  # --json too: json.dumps escapes every non-ASCII
    assert_terminal_safe(err.getvalue())
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()
