"""`trainparity coverage --ids-dir` says each epoch's verdict in its text, and names the failing one.

Issue 53, finding 7: the text showed one FAIL whose first violation read
"epoch n/a" (a missing ID has no epoch of its own); the per-epoch verdicts
were only in `--json`.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.cli_here import CLI, completed_here

# Epoch 0 holds every ID of 0..255 once; epoch 1 misses ID 7.
_WRITER = """
import sys
from trainparity import record_ids
from trainparity._internal.recording.record_ids import flush_ids
record_ids(range(256), epoch=0, directory=sys.argv[1], rank=0)
record_ids([i for i in range(256) if i != 7], epoch=1, directory=sys.argv[1], rank=0)
flush_ids()
"""


def _coverage(*arguments: str) -> subprocess.CompletedProcess[str]:
    return completed_here([*CLI, "coverage", *arguments])  # in this process: tests/cli_here.py


def test_the_text_names_the_failing_epoch_and_shows_every_epochs_verdict(tmp_path):
    directory = tmp_path / "ids"
    subprocess.run([sys.executable, "-c", _WRITER, str(directory)], check=True, timeout=120)
    options = ("--ids-dir", str(directory), "--policy", "exactly_once", "--universe", "256")
    shown = _coverage(*options)
    assert shown.returncode == 1, shown.stderr
    lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert lines[0] == "FAIL: epoch 1: exactly_once policy was violated"
    epochs = lines.index("Epochs")
    assert lines[epochs + 1 : epochs + 4] == ["epoch verdict", "0 PASS", "1 FAIL"]
    report = json.loads(_coverage(*options, "--json").stdout)
    assert report["epochs"] == {"0": "PASS", "1": "FAIL"}
    assert report["message"] == "epoch 1: exactly_once policy was violated"
    assert report["first_violation"]["sample_id"] == 7
