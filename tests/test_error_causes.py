"""Errors keep their cause (issue 42, findings 2-4): the observer's `Type: text` and hint,
a failed child's exception line as the headline, and no false "fresh resume processes
distinct: no".

Each check runs `trainparity resume -- <tiny script>` for real (split 1, total 2, one thread
per child); the scripts save checkpoints that the default observer cannot read.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from trainparity._internal.cli.main import main
from trainparity._internal.processes.failure_text import exception_line
from trainparity._internal.processes.observer.snapshot_service import DEFAULT_OBSERVER_HINT

# A training script's command line after `--`: the check's own interpreter runs it.
TEMPLATE = ["{checkpoint}", "{end_step}", "--resume", "{resume_from?}"]
# The start of torch.load's refusal of a pickled numpy array under weights_only.
REFUSAL = "Weights only load failed"

LIST_CHECKPOINT = """
import sys, torch
torch.save([torch.zeros(2), int(sys.argv[2])], sys.argv[1])
"""
DIRECTORY_CHECKPOINT = """
import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
with open(os.path.join(sys.argv[1], "part.bin"), "wb") as stream:
    stream.write(b"not a DCP checkpoint")
"""
# Saves numpy's RNG state beside the weights, and resumes as scripts written before
# torch 2.6 do: a plain torch.load, which now refuses numpy arrays (weights_only=True).
NUMPY_RNG_CHECKPOINT = """
import sys, numpy, torch
if len(sys.argv) > 4:
    torch.load(sys.argv[4])
state = {"weight": torch.full((2,), float(sys.argv[2])), "rng": numpy.random.get_state()}
torch.save(state, sys.argv[1])
"""
# An observer of the user's own, for the numpy script: what a user writes after the hint.
TRUSTING_OBSERVER = """
import torch
def weights(path):
    return {"weight": torch.load(path, weights_only=False)["weight"]}
"""


def _resume(capsys, tmp_path: Path, script: str, *options: str) -> tuple[int, str, dict]:
    """Run `trainparity resume` on `script` (text) with the work dir kept; (exit, text, report)."""
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    report_path = tmp_path / "report.json"
    code = main(
        [
            "resume",
            "--split-step",
            "1",
            "--total-step",
            "2",
            "--checkpoint",
            "{run_dir}/ck.pt",
            "--cwd",
            str(tmp_path),
            "--work-dir",
            str(tmp_path / "work"),
            "--env",
            "OMP_NUM_THREADS=1",
            "--report",
            str(report_path),
            "--no-progress",
            *options,
            "--",
            sys.executable,
            "train.py",
            *TEMPLATE,
        ]
    )
    printed = capsys.readouterr().out
    return code, printed, json.loads(report_path.read_text(encoding="utf-8"))


def test_a_checkpoint_that_holds_a_list_names_the_type_its_text_and_the_way_out(capsys, tmp_path):
    code, printed, report = _resume(capsys, tmp_path, LIST_CHECKPOINT)
    checkpoint = tmp_path / "work" / "baseline_a" / "ck.pt"
    assert (code, report["outcome"]) == (3, "ERROR")
    assert report["message"] == (
        "baseline_a checkpoint observation failed: observe_checkpoint callback failed: "
        f"TypeError: the default observer needs a checkpoint that holds a dict, {checkpoint} "
        "holds a list: pass observe='module:function' (--observe)"
    )
    assert printed.startswith(f"ERROR: {report['message']}\n")
    # The full traceback is in the observer's log under the kept work dir.
    log = (tmp_path / "work" / "snapshots" / "observer.stderr.log").read_text(encoding="utf-8")
    assert log.startswith("Traceback (most recent call last):\n")
    assert "in observe_default\n    raise TypeError(\n" in log
    assert log.endswith("holds a list: pass observe='module:function' (--observe)\n")
    # Only baseline_a's checkpoint was reached: nothing was shown about the resume's processes.
    assert report["fresh_resume_processes_distinct"] is None
    assert "fresh resume processes distinct" not in printed


def test_a_directory_that_is_not_dcp_gives_file_not_found_with_its_text_and_the_hint(
    capsys, tmp_path
):
    code, printed, report = _resume(capsys, tmp_path, DIRECTORY_CHECKPOINT)
    checkpoint = tmp_path / "work" / "baseline_a" / "ck.pt"
    assert (code, report["outcome"]) == (3, "ERROR")
    assert report["message"] == (
        "baseline_a checkpoint observation failed: observe_checkpoint callback failed: "
        f"FileNotFoundError: '{checkpoint}' is not a DCP checkpoint directory (no .metadata); "
        f"{DEFAULT_OBSERVER_HINT}"
    )
    assert "pass observe='module:function' (--observe)" in DEFAULT_OBSERVER_HINT
    assert "fresh resume processes distinct" not in printed


def test_numpy_rng_state_refused_by_weights_only_heads_the_message_with_the_exception(
    capsys, tmp_path
):
    code, printed, report = _resume(capsys, tmp_path, NUMPY_RNG_CHECKPOINT)
    first_line, *more_lines = report["message"].split("\n")
    assert (code, report["outcome"]) == (3, "ERROR")
    assert first_line.startswith(
        "baseline_a checkpoint observation failed: observe_checkpoint callback failed: "
        f"UnpicklingError: {REFUSAL}. This file can still be loaded, to do so you have two "
        "options, do those steps only if you trust the source of the checkpoint."
    )
    # torch's own lines follow (what it refused, how to allow it), then the observer's hint;
    # torch's bold markup does not reach the report.
    assert any("Unsupported global: GLOBAL numpy" in line for line in more_lines)
    assert more_lines[-1] == DEFAULT_OBSERVER_HINT
    assert "\x1b" not in report["message"]
    assert printed.startswith(f"ERROR: {first_line}\n")


def test_a_failed_childs_headline_is_its_exception_line_not_the_last_line_of_stderr(
    capsys, tmp_path
):
    (tmp_path / "trusting_observer.py").write_text(TRUSTING_OBSERVER, encoding="utf-8")
    code, printed, report = _resume(
        capsys, tmp_path, NUMPY_RNG_CHECKPOINT, "--observe", "trusting_observer:weights"
    )
    assert (code, report["outcome"]) == (3, "ERROR")
    first_line = report["message"].split("\n")[0]
    assert first_line.startswith(
        f"candidate_resume child exited with status 1: _pickle.UnpicklingError: {REFUSAL}."
    )
    assert printed.startswith(f"ERROR: {first_line}\n")
    # The rest of the child's stderr is still there, its generic last line included.
    assert "  | last " in printed and "Check the documentation of torch.load" in printed
    # Every phase ran, the resume in a process of its own: that is a true "yes" in an ERROR.
    pids = {process["phase"]: process["pid"] for process in report["processes"]}
    assert list(pids) == ["baseline_a", "baseline_b", "candidate_split", "candidate_resume"]
    assert pids["candidate_split"] != pids["candidate_resume"]
    assert report["fresh_resume_processes_distinct"] is True
    assert "fresh resume processes distinct  yes" in printed


def _traceback_lines(error: BaseException) -> list[str]:
    text = "".join(traceback.format_exception(error))
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _refusal() -> BaseException:
    """torch.load's real refusal of a numpy array under weights_only, as raised."""
    buffer = io.BytesIO()
    torch.save({"rng": np.random.get_state()}, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError) as raised:
        torch.load(buffer, weights_only=True)
    return raised.value


def test_exception_line_skips_the_rest_of_a_multi_line_message():
    lines = _traceback_lines(_refusal())
    assert lines[-1].startswith("Check the documentation of torch.load")
    assert exception_line(lines).startswith(f"_pickle.UnpicklingError: {REFUSAL}.")
    assert "\x1b" not in exception_line(lines)


def test_exception_line_takes_the_last_of_chained_tracebacks():
    try:
        try:
            raise KeyError("step")
        except KeyError as cause:
            raise RuntimeError("could not resume: the checkpoint has no step") from cause
    except RuntimeError as error:
        lines = _traceback_lines(error)
    assert lines[0] == "Traceback (most recent call last):"
    assert exception_line(lines) == "RuntimeError: could not resume: the checkpoint has no step"


def test_exception_line_without_a_traceback_header_in_view():
    # The top of a deep traceback was cut off the tail: the exception line is still found.
    lines = _traceback_lines(_refusal())[3:]
    assert not any(line.startswith("Traceback") for line in lines)
    assert exception_line(lines).startswith(f"_pickle.UnpicklingError: {REFUSAL}.")
    # No exception at all (a script's own exit message): its last line, as before.
    assert exception_line(["loading data", "fatal: no such dataset 'cifar11'"]) == (
        "fatal: no such dataset 'cifar11'"
    )
    assert exception_line([]) is None
