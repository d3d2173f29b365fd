"""The verdict-quality corpus: run every entry, print each verdict and a precision/recall table.

The corpus (benchmarks/corpus/programs/*.py, each defining ENTRIES) holds clean
training programs, each in a deterministic and a nondeterministic form, and
planted faults of real-world classes (benchmarks/corpus/__init__.py,
FAULT_CLASSES). A clean entry must PASS; a fault entry is detected when it
FAILs with its first difference at the expected component (and step). An
`explain` entry is right when its explanation names the planted cause.

Run from the repository root: `python benchmarks/verdicts.py` (everything),
`--fast` (the suite's fast subset), `--only SUBSTRING` (entries whose id holds
it; repeatable), `--list`, `--json FILE`, `--jobs N` (checks at once),
`--start fresh` (default: warm servers shared by all checks).

Exit status 1 when a clean entry FAILs or ERRORs, a deterministic clean entry
ABSTAINs, or a fault is missed (or found elsewhere); 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pkgutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import FAULT_CLASSES, Entry  # noqa: E402

OUTCOMES = ("PASS", "FAIL", "ABSTAIN", "ERROR")


@dataclass
class Verdict:
    entry_id: str
    entry: Entry
    outcome: str  # PASS | FAIL | ABSTAIN | ERROR
    path: str | None
    step: int | None
    seconds: float
    message: str
    # clean: the outcome; fault: "detected" | "elsewhere" (FAIL, another place) | "missed"
    judgement: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.entry_id,
            "program": self.entry.program,
            "form": self.entry.form,
            "check": self.entry.check,
            "fault": self.entry.fault,
            "expect_path": self.entry.expect_path,
            "expect_step": self.entry.expect_step,
            "outcome": self.outcome,
            "path": self.path,
            "step": self.step,
            "seconds": round(self.seconds, 2),
            "judgement": self.judgement,
            "message": self.message,
            "note": self.entry.note,
        }


def load_entries() -> tuple[list[tuple[str, Entry]], list[str]]:
    """Every program module's entries with unique ids, and the modules that failed to import."""
    import benchmarks.corpus.programs as programs

    entries: list[tuple[str, Entry]] = []
    broken: list[str] = []
    seen: dict[str, int] = {}
    for module_info in sorted(pkgutil.iter_modules(programs.__path__), key=lambda m: m.name):
        name = f"{programs.__name__}.{module_info.name}"
        try:
            module = importlib.import_module(name)
        except Exception as error:  # a module of the corpus that cannot load is a finding
            broken.append(f"{name}: {type(error).__name__}: {error}")
            continue
        for entry in getattr(module, "ENTRIES", ()):
            if entry.fault is not None and entry.fault not in FAULT_CLASSES:
                broken.append(f"{name}: {entry.program}: unknown fault class {entry.fault!r}")
                continue
            base = f"{entry.program}/{entry.form}/{entry.check}/{entry.fault or 'clean'}"
            seen[base] = seen.get(base, 0) + 1
            entry_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
            entries.append((entry_id, entry))
    return entries, broken


def outcome_of(result: Any) -> str:
    outcome = getattr(result, "outcome", None)
    return str(getattr(outcome, "value", outcome)) if outcome is not None else "ERROR"


def explanation_text(result: Any) -> str:
    parts = [str(getattr(result, "message", "")), str(getattr(result, "trace_message", ""))]
    for lead in getattr(result, "leads", ()):
        parts.append(f"{lead.knob} {lead.status} {lead.evidence}")
    return "\n".join(parts)


def judge(entry_id: str, entry: Entry, result: Any, seconds: float) -> Verdict:
    outcome = outcome_of(result)
    message = str(getattr(result, "message", ""))
    primary = getattr(result, "primary_difference", None)
    path = getattr(primary, "path", None)
    step = getattr(result, "first_divergent_step", None)
    if entry.check == "explain":
        step = getattr(result, "step", None)
    if entry.fault is None:
        judgement = outcome
    elif entry.check == "explain":
        named = entry.expect_path is not None and (
            entry.expect_path.lower() in explanation_text(result).lower()
        )
        judgement = "detected" if outcome != "ERROR" and named else "missed"
    elif outcome == "FAIL":
        at_path = path is not None and entry.expect_path is not None
        at_path = at_path and path.startswith(entry.expect_path)
        at_step = entry.expect_step is None or step == entry.expect_step
        judgement = "detected" if at_path and at_step else "elsewhere"
    else:
        judgement = "missed"
    return Verdict(entry_id, entry, outcome, path, step, seconds, message, judgement)


def run_entry(entry_id: str, entry: Entry, scratch: Path) -> Verdict:
    work = scratch / entry_id.replace("/", "__").replace("#", "_")
    start = time.perf_counter()
    try:
        result = entry.run(work)
    except Exception as error:  # the check itself raised: an ERROR of the corpus entry
        message = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
        return Verdict(
            entry_id,
            entry,
            "ERROR",
            None,
            None,
            time.perf_counter() - start,
            message,
            "ERROR" if entry.fault is None else "missed",
        )
    return judge(entry_id, entry, result, time.perf_counter() - start)


def line_of(verdict: Verdict) -> str:
    entry = verdict.entry
    fault = entry.fault or "clean"
    judged = "" if entry.fault is None else f" [{verdict.judgement}]"
    return (
        f"{entry.program:32} {entry.form:16} {entry.check:12} {fault:18} "
        f"{verdict.outcome:7}{judged:12} {verdict.path or '-':44} "
        f"{'-' if verdict.step is None else verdict.step:>4} {verdict.seconds:7.1f}s"
    )


def summary(verdicts: list[Verdict], wall: float) -> tuple[str, bool]:
    """The Markdown table and whether the corpus met its bar."""
    clean = {form: dict.fromkeys(OUTCOMES, 0) for form in ("deterministic", "nondeterministic")}
    faults = {"detected": 0, "elsewhere": 0, "missed": 0}
    for verdict in verdicts:
        if verdict.entry.fault is None:
            clean[verdict.entry.form][verdict.outcome] += 1
        else:
            faults[verdict.judgement] += 1
    clean_fails = sum(counts["FAIL"] for counts in clean.values())
    fault_fails = faults["detected"] + faults["elsewhere"]
    total_faults = sum(faults.values())
    precision = fault_fails / (fault_fails + clean_fails) if fault_fails + clean_fails else 1.0
    recall = faults["detected"] / total_faults if total_faults else 1.0
    rows = [
        "| entries | PASS | FAIL | ABSTAIN | ERROR |",
        "| --- | --- | --- | --- | --- |",
    ]
    for form, counts in clean.items():
        rows.append(f"| clean, {form} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    rows += [
        "",
        "| faults | detected at the expected component and step | FAIL elsewhere | missed |",
        "| --- | --- | --- | --- |",
        f"| {total_faults} | {faults['detected']} | {faults['elsewhere']} | {faults['missed']} |",
        "",
        f"precision (FAIL verdicts on faulty programs / all FAIL verdicts): {precision:.3f} "
        f"({fault_fails}/{fault_fails + clean_fails})",
        f"recall (faults detected at the expected component and step / faults): {recall:.3f} "
        f"({faults['detected']}/{total_faults})",
        f"total wall time: {wall:.0f} s for {len(verdicts)} entries",
    ]
    bad = (
        clean_fails
        + sum(counts["ERROR"] for counts in clean.values())
        + clean["deterministic"]["ABSTAIN"]
        + faults["missed"]
        + faults["elsewhere"]
    )
    return "\n".join(rows), bad == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="the suite's fast subset only")
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTRING")
    parser.add_argument("--json", type=Path, metavar="FILE")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--start", choices=("warm", "fresh"), default="warm")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep every check's work dir")
    args = parser.parse_args(argv)

    entries, broken = load_entries()
    for problem in broken:
        print(f"corpus module not loaded: {problem}", file=sys.stderr)
    selected = [
        (entry_id, entry)
        for entry_id, entry in entries
        if (not args.fast or entry.fast)
        and (not args.only or any(text in entry_id for text in args.only))
    ]
    if args.list:
        for entry_id, entry in selected:
            print(f"{entry_id:72} {entry.note}")
        return 0
    if not selected:
        print("no entry matches", file=sys.stderr)
        return 2

    os.environ["TRAINPARITY_START"] = args.start  # check_*(start=None) takes it
    import trainparity

    began = time.perf_counter()
    verdicts: list[Verdict] = []
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            scratch = args.keep
            scratch.mkdir(parents=True, exist_ok=True)
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="verdicts-")))
        if args.start == "warm":
            stack.enter_context(trainparity.shared_warm_servers(max_idle=4))
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_entry, i, e, scratch) for i, e in selected]
            for future in futures:
                verdict = future.result()
                verdicts.append(verdict)
                print(line_of(verdict), flush=True)
    wall = time.perf_counter() - began

    table, met = summary(verdicts, wall)
    print()
    print(table)
    wrong = [
        v
        for v in verdicts
        if (v.entry.fault is None and v.outcome != "PASS")
        or (v.entry.fault is not None and v.judgement != "detected")
    ]
    if wrong:
        print("\nNot as expected:")
        for verdict in wrong:
            print(
                f"- {verdict.entry_id}: {verdict.outcome}: {verdict.message.splitlines()[0][:400]}"
            )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "entries": [v.to_dict() for v in verdicts],
                    "wall_seconds": round(wall, 1),
                    "modules_not_loaded": broken,
                },
                indent=2,
            )
        )
    return 0 if met and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
