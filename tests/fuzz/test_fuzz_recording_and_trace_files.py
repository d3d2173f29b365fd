"""Fuzz the recording (`record()`) and trace (`trace()`) readers with real files, damaged byte by byte.

A recording read back must be a Recording or RecordingError (a
SnapshotFileError); diff_recordings raises RecordingError for a damaged one,
which `trainparity diff` reports as ERROR (exit 3), and never passes over
fewer steps than were written. A trace must be a Trace or
SnapshotFileError; diff_traces answers ERROR. Never another exception, a hang
or a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from trainparity import trace
from trainparity._internal.recording.diff import diff_recordings
from trainparity._internal.recording.frames import RecordingError
from trainparity._internal.recording.reader import read_recording
from trainparity._internal.recording.recorder import record, recording_to
from trainparity._internal.state.snapshot_file import SnapshotFileError
from trainparity._internal.why.forensics.trace_diff import diff_traces
from trainparity._internal.why.forensics.trace_file import read_trace
from trainparity.outcomes import Outcome

from tests.fuzz.budget import fuzz_settings, within_seconds
from tests.fuzz.checks import assert_well_formed_result, run_cli
from tests.fuzz.conftest import Seeds
from tests.fuzz.mutations import BYTE_EDITS, apply_edits


def _train(steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, torch.randn(8, 4)


def _step(model, optimizer, batch) -> None:
    optimizer.zero_grad()
    model(batch).pow(2).mean().backward()
    optimizer.step()


@pytest.fixture(scope="module")
def recording_seeds(tmp_path_factory) -> Seeds:
    """`full` and `summary`: three steps of a tiny model recorded by the real writer."""
    directory = tmp_path_factory.mktemp("recording-seeds")
    files = {}
    for mode in ("full", "summary"):
        model, optimizer, batch = _train(3)
        with recording_to(directory / mode, mode=mode) as rank_file:
            for step in range(1, 4):
                _step(model, optimizer, batch)
                record(step, {"model": model.state_dict(), "step": step, "lr": 0.1})
        files[mode] = Path(rank_file)
    return Seeds(directory, files)


@pytest.fixture(scope="module")
def trace_seed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace-seed") / "step.trace"
    model, optimizer, batch = _train(1)
    trace(path, model=model, inputs={"batch": batch}, run=lambda: _step(model, optimizer, batch))
    return path


@fuzz_settings(ci_examples=150)
@given(mode=st.sampled_from(["full", "summary"]), edits=BYTE_EDITS)
def test_damaged_recordings_read_or_raise_recording_error(recording_seeds, mode, edits):
    seed = recording_seeds.files[mode]
    mutant_directory = recording_seeds.fresh_path("")
    mutant_directory.mkdir()
    (mutant_directory / seed.name).write_bytes(apply_edits(seed.read_bytes(), edits))
    with within_seconds():
        try:
            recording = read_recording(mutant_directory)
            readable = True
            assert all(step.state is not None for step in recording.steps)
        except RecordingError:
            readable = False
        try:
            result = diff_recordings(seed.parent, mutant_directory)
            assert_well_formed_result(result)
            assert readable
            if result.outcome is Outcome.PASS:  # never over fewer steps than were written
                assert result.compared_steps == (1, 2, 3), result.message
        except RecordingError:
            assert not readable
        code, _, _ = run_cli(["diff", str(seed.parent), str(mutant_directory)])
        assert code in (0, 1, 2, 3)
        if not readable:
            assert code == 3


@fuzz_settings(ci_examples=150)
@given(edits=BYTE_EDITS)
def test_damaged_traces_read_or_raise_snapshot_file_error(trace_seed, tmp_path_factory, edits):
    mutant = tmp_path_factory.mktemp("trace-mutant") / "mutant.trace"
    mutant.write_bytes(apply_edits(trace_seed.read_bytes(), edits))
    with within_seconds():
        try:
            read_trace(mutant)
            readable = True
        except SnapshotFileError:
            readable = False
        result = diff_traces(trace_seed, mutant)
        report = assert_well_formed_result(result)
        if not readable:
            assert result.outcome is Outcome.ERROR, report["message"]
        code, _, _ = run_cli(["diff", str(trace_seed), str(mutant)])
        # A damaged trace may no longer look like a trace: then it is a usage error (4).
        assert code in (0, 1, 2, 3, 4)
