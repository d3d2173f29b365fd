"""How every result shows itself: a one-line repr, an HTML fragment in notebooks, its machine report."""

from __future__ import annotations

from typing import Any

from trainparity._internal.reports.html_views import result_html
from trainparity._internal.reports.machine import report_dict
from trainparity._internal.reports.text_views import result_repr

__all__ = ["ReportedResult"]


class ReportedResult:
    """Mixin of every result dataclass; declare the dataclass with `repr=False` so this repr is kept."""

    __slots__ = ()

    __repr__ = result_repr
    _repr_html_ = result_html

    def to_dict(self) -> dict[str, Any]:
        """Report metadata, then every field (nested values as dicts, tuples kept)."""
        return report_dict(self)
