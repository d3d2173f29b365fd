"""Sections of the processes a check started: its phases, ranks and timings.

Every check that runs phases in child processes reports how each ended and
what it cost (wall, CPU, peak memory) and where the check's time went; these
sections lay that out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.sections.cells import NOT_AVAILABLE, Section, seconds_cell

__all__ = ["phases_section", "timings_section"]

# Whole-check timings first; per-step ones (already in the phase table) after them.
_TIMING_SUMMARY_KEYS = (
    "total_wall",
    "end_to_end_multiplier",
    "single_normal_run",
    "baseline_self_consistency",
    "candidate_save_exit_new_process_load_resume",
    "comparison",
    "snapshot_capture",
    "serialization",
)


def phases_section(report: Mapping[str, Any]) -> Section | None:
    processes = report.get("processes")
    if not processes:
        return None
    rows = []
    for process in processes:
        rows.append(
            (
                str(process["phase"]),
                str(process["pid"]),
                str(process["returncode"]),
                seconds_cell(process.get("elapsed_seconds")),
                seconds_cell(process.get("user_seconds")),
                seconds_cell(process.get("system_seconds")),
                _mebibytes(process.get("peak_rss_bytes")),
            )
        )
        rows.extend(_rank_row(rank) for rank in process.get("ranks") or ())
    return Section(
        "Phases",
        tuple(rows),
        ("phase", "pid", "exit", "wall s", "user s", "sys s", "peak RSS MiB"),
        whole=True,
    )


def _rank_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    """A torchrun rank under its phase; '~' marks figures sampled while it ran, not measured at exit."""

    def sampled(shown: str) -> str:
        # None: measured by the agent's wait4 at the rank's exit (a warm agent's forked ranks).
        exact = "sample_interval_seconds" in rank and rank["sample_interval_seconds"] is None
        return shown if exact or shown == NOT_AVAILABLE else f"~{shown}"

    returncode = rank.get("returncode")
    return (
        f"  rank {rank['rank']}",
        str(rank["pid"]),
        NOT_AVAILABLE if returncode is None else str(returncode),
        "",
        sampled(seconds_cell(rank.get("user_seconds"))),
        sampled(seconds_cell(rank.get("system_seconds"))),
        sampled(_mebibytes(rank.get("peak_rss_bytes"))),
    )


def _mebibytes(value: Any) -> str:
    return f"{value / (1 << 20):.0f}" if value else NOT_AVAILABLE


def timings_section(report: Mapping[str, Any]) -> Section | None:
    timing = report.get("timing_seconds")
    if not timing:
        return None
    leading = [key for key in _TIMING_SUMMARY_KEYS if key in timing]
    rows = []
    for key in [*leading, *(key for key in timing if key not in leading)]:
        value = timing[key]
        shown = f"{value:.2f}x" if key == "end_to_end_multiplier" else seconds_cell(value)
        rows.append((key, shown))
    return Section("Timings", tuple(rows), ("step", "seconds"))
