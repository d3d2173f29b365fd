"""Write what a user sees of trainparity into one folder, to diff before and after a move.

Run it on two checkouts (each installed) and compare the folders with
`diff -r`: a change that only moves code must leave every file identical.
It captures, through public paths and the command line only (so it runs on
any layout):

- the help of `trainparity` and of each command;
- the three quickstarts' machine reports, with the fields that depend on the
  machine or the clock removed (tests/test_report_pins.py's rule);
- the text and HTML views of a passing and a failing resume check;
- the snapshot files of a recorded resume check, byte for byte, with the
  environment fingerprint (the machine's) left out of the comparison.

    python benchmarks/behaviour_surface.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
from tests.test_report_pins import pinned_form  # noqa: E402

COMMANDS = (
    "resume",
    "runs",
    "judge",
    "accumulation",
    "coverage",
    "snapshot",
    "trace",
    "diff",
    "explain",
    "env",
)
QUICKSTARTS = ("resume", "accumulation", "sample_coverage")
RESUME_CASES = ("CleanCase", "FaultyCase")
# Lines of a text view or HTML page that carry a duration, a PID or the machine.
VOLATILE_LINE = re.compile(
    r"seconds|elapsed|[0-9.]+ ?s\b|pid|rss|timing|hostname|peak|total_wall|multiplier|single_normal_run"
    r"|snapshot_capture|^\s+[a-z_]+\s+[0-9]+\.[0-9]+x?$",
    re.I,
)
# A duration in the JSON report an HTML page embeds (any float printed with full precision).
DURATION = re.compile(r"(&quot;[a-z_]+&quot;: )[0-9]+\.[0-9]{6,}")


def run(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "100", "TRAINPARITY_START": "fresh"}
    return subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        check=False,
    )


# A row of the phases table: the phase, then its PID, exit code and resources.
PHASE_ROW = re.compile(r"^(\s+(?:baseline|candidate)_\w+)\s.*$", re.M)


def stable_lines(text: str) -> str:
    text = DURATION.sub(r"\1(duration)", PHASE_ROW.sub(r"\1 (process figures)", text))
    return "".join(line for line in text.splitlines(True) if not VOLATILE_LINE.search(line))


def capture_help(out: Path) -> None:
    (out / "help.txt").write_text(run("-m", "trainparity", "--help").stdout)
    for command in COMMANDS:
        shown = run("-m", "trainparity", command, "--help")
        (out / f"help-{command}.txt").write_text(shown.stdout + shown.stderr)


def capture_quickstarts(out: Path) -> None:
    for quickstart in QUICKSTARTS:
        shown = run("-m", f"trainparity.quickstarts.{quickstart}", "--json")
        payload = pinned_form(json.loads(shown.stdout))
        text = json.dumps(payload, indent=2, sort_keys=True)
        (out / f"quickstart-{quickstart}.json").write_text(f"rc {shown.returncode}\n{text}\n")


def capture_views(out: Path, work: Path) -> None:
    for case in RESUME_CASES:
        page = work / f"{case}.html"
        shown = run(
            "-m",
            "trainparity",
            "resume",
            "--no-progress",
            "--report",
            str(page),
            f"trainparity.quickstarts.resume:{case}",
        )
        text = stable_lines(shown.stdout.replace(str(work), "WORK"))
        (out / f"resume-{case}.txt").write_text(f"rc {shown.returncode}\n{text}")
        html = stable_lines(page.read_text().replace(str(work), "WORK"))
        (out / f"resume-{case}.html").write_text(html)


def capture_snapshots(out: Path, work: Path) -> None:
    """The snapshot files of one `trainparity snapshot` of a fixed state, header and bytes."""
    script = work / "state.py"
    script.write_text(
        "import torch\n"
        "def state():\n"
        "    g = torch.Generator().manual_seed(5)\n"
        "    return {'w': torch.randn(4, 3, generator=g), 'step': 3, 'name': 'x',\n"
        "            'm': {'b': torch.arange(5, dtype=torch.int64)}}\n"
    )
    target = work / "state.safetensors"
    shown = run(
        "-m",
        "trainparity",
        "snapshot",
        "--call",
        "state:state",
        "--step",
        "3",
        "-o",
        str(target),
        cwd=work,
    )
    if not target.exists():
        (out / "snapshot.txt").write_text(f"rc {shown.returncode}\n{shown.stdout}{shown.stderr}")
        return
    data = target.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    manifest = json.loads(header.get("__metadata__", {}).get("trainparity", "{}") or "{}")
    manifest.pop("environment", None)
    # The digest covers the manifest, whose environment is the machine's and the version's.
    header.get("__metadata__", {}).pop("trainparity", None)
    header.get("__metadata__", {}).pop("trainparity_digest", None)
    (out / "snapshot-header.json").write_text(
        json.dumps({"header": header, "manifest": manifest}, indent=2, sort_keys=True) + "\n"
    )
    (out / "snapshot-tensor-bytes.hex").write_text(data[8 + length :].hex() + "\n")


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        capture_help(out)
        capture_quickstarts(out)
        capture_views(out, work)
        capture_snapshots(out, work)
    print(f"wrote {len(list(out.iterdir()))} files to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
