"""Self-contained HTML reports: one page per result, readable offline, no scripts, no network."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.text_views import headline

__all__ = ["render_html_report", "write_html_report"]

_PAGE_STYLE = """
body { margin: 24px auto; max-width: 1100px; padding: 0 16px; color: #1f2328; background: #fff; }
h1 { font-family: system-ui, sans-serif; font-size: 20px; margin: 0 0 12px; }
details { margin-top: 16px; font-family: system-ui, sans-serif; }
details pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
"""


def render_html_report(report: Mapping[str, Any] | Any, *, title: str | None = None) -> str:
    """The whole page for a result (anything with `to_dict()`) or a report dictionary.

    Everything is inline (style, data); nothing is fetched, so the file can be
    attached to a CI run or mailed. Tables show up to 50 rows each; the full
    report, environment included, follows as JSON.
    """
    payload = _as_report(report)
    heading = title or "trainparity report"
    body = html_fragment(payload, max_rows=50, include_environment="outcome" not in payload)
    full_json = json.dumps(payload, indent=2, sort_keys=True, default=str)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title or headline(payload))}</title><style>{_PAGE_STYLE}</style></head><body>"
        f"<h1>{html.escape(heading)}</h1>{body}"
        f"<details><summary>Full report (JSON)</summary><pre>{html.escape(full_json)}</pre></details>"
        "</body></html>\n"
    )


def write_html_report(
    path: str | os.PathLike[str], report: Mapping[str, Any] | Any, *, title: str | None = None
) -> int:
    """Write the page to `path` (parent directories created); returns the byte size.

    A path in the report that is not valid UTF-8 (a surrogate-escaped byte, as
    Python decodes such file names) is written as `\\udcff`, as the JSON
    report writes it.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = render_html_report(report, title=title).encode("utf-8", "backslashreplace")
    target.write_bytes(data)
    return len(data)


def _as_report(report: Mapping[str, Any] | Any) -> Mapping[str, Any]:
    if isinstance(report, Mapping):
        return report
    to_dict = getattr(report, "to_dict", None)
    if to_dict is None:
        raise TypeError(
            f"expected a trainparity result (with to_dict()) or a report dict, not {type(report).__name__}"
        )
    return to_dict()
