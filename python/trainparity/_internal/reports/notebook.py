"""Live progress of a check in a Jupyter notebook, one table updated in place.

`NotebookProgress` is a progress callback: each phase event redraws a table of
the phases so far, styled like the report's HTML fragment.
"""

from __future__ import annotations

from typing import Any

from trainparity._internal.reports.html_views import html_section
from trainparity._internal.reports.sections.cells import Section, seconds_cell

__all__ = ["NotebookProgress"]


class NotebookProgress:
    """A live per-phase table in Jupyter: `check_resume(case, progress=NotebookProgress())`.

    Each ProgressEvent updates one table in place (an IPython display handle):
    phase, state and its own time. Needs IPython; outside a notebook use
    `progress=True`, which prints lines to stderr.
    """

    def __init__(self) -> None:
        try:
            from IPython.display import HTML, display
        except ImportError as error:
            raise RuntimeError(
                "NotebookProgress needs IPython (a Jupyter kernel); use progress=True to print phase lines instead"
            ) from error
        self._html = HTML
        self._display = display
        self._handle: Any = None
        self.phases: dict[str, tuple[str, str]] = {}
        self.notes: list[str] = []

    def __call__(self, event: Any) -> None:
        if event.kind == "note":  # a remark on the whole check, shown under the table
            self.notes.append(str(event.detail))
        elif event.kind == "start":
            self.phases[event.phase] = ("running", "")
        else:
            self.phases[event.phase] = ("done", seconds_cell(event.elapsed_seconds))
        section = Section(
            f"Progress (t+{event.since_check_start_seconds:.1f} s)",
            tuple((phase, state, seconds) for phase, (state, seconds) in self.phases.items()),
            ("phase", "state", "seconds"),
        )
        sections = [section]
        if self.notes:
            sections.append(Section("Notes", tuple((note,) for note in self.notes), ("note",)))
        body = "".join(html_section(part) for part in sections)
        view = self._html(f"<div class='trainparity-result'>{body}</div>")
        if self._handle is None:
            self._handle = self._display(view, display_id=True)
        else:
            self._handle.update(view)
