"""record(): what it stores, what it costs when off, and what survives a killed process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy
import pytest
import torch
import trainparity
from trainparity import ExactComparison
from trainparity._internal.recording import RecordingError, read_recording, recording_to
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.normalize import normalize_observation

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def training_state(model, optimizer, step):
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {"python": random.getstate(), "numpy": numpy.random.get_state()},
        "step": step,
        "ids": (step, numpy.int64(step + 1)),
    }


def train(directory, *, mode, steps=3, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    states = []
    with recording_to(directory, mode=mode, **options) as path:
        for step in range(1, steps + 1):
            loss = model(torch.randn(5, 4)).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            state = training_state(model, optimizer, step)
            trainparity.record(step, state)
            states.append(freeze(normalize_observation(state)))
    return path, states


@pytest.mark.parametrize("mode", ["full", "summary", "auto"])
def test_steps_read_back_as_the_observed_state(tmp_path, mode):
    path, states = train(tmp_path / mode, mode=mode)
    recording = read_recording(tmp_path / mode)
    assert recording.path == path and recording.rank == 0 and not recording.partial_tail
    assert [step.step for step in recording.steps] == [1, 2, 3]
    assert all(step.full is (mode != "summary") for step in recording.steps)
    if mode == "summary":  # only digests are left: compare them with a full recording's
        train(tmp_path / "full", mode="full")
        states = [step.state for step in read_recording(tmp_path / "full").steps]
    for recorded, expected in zip(recording.steps, states, strict=True):
        assert ExactComparison().compare_all(recorded.state, expected) == ()
        weight = recorded.summary('model["0.weight"]')
        live = model_weight(expected).to_tensor().double()
        assert weight.count == live.numel()
        assert weight.sum == pytest.approx(float(live.sum()), rel=1e-12)
        assert weight.l2_norm == pytest.approx(float(live.norm()), rel=1e-12)
        assert weight.max_abs == float(live.abs().max())
        assert (weight.nan_count, weight.inf_count) == (0, 0)


def model_weight(state):
    return state.as_dict()["model"].as_dict()["0.weight"]


def test_auto_mode_switches_to_summaries_above_the_threshold(tmp_path):
    train(tmp_path, mode="auto", full_below=100)
    assert [step.full for step in read_recording(tmp_path).steps] == [False, False, False]


def test_summary_mode_stores_at_most_128_bytes_per_tensor_and_step(tmp_path):
    tensors = {f"layer{index}": torch.randn(64, 64) for index in range(200)}
    with recording_to(tmp_path, mode="summary") as path:
        trainparity.record(0, {"model": tensors})
        first = path.stat().st_size
        for step in range(1, 11):
            for tensor in tensors.values():
                tensor.add_(1.0)
            trainparity.record(step, {"model": tensors})
    per_tensor_and_step = (path.stat().st_size - first) / (10 * len(tensors))
    assert per_tensor_and_step <= 128
    recording = read_recording(tmp_path)
    assert len(recording.steps) == 11 and not recording.steps[5].full


def test_a_changed_layout_is_written_again(tmp_path):
    with recording_to(tmp_path, mode="full"):
        trainparity.record(1, {"last_ids": None, "w": torch.ones(2)})
        trainparity.record(2, {"last_ids": (0, 1), "w": torch.ones(3)})
        trainparity.record(3, {"last_ids": (2, 3), "w": torch.ones(3)})
    steps = read_recording(tmp_path).steps
    assert steps[0].state.as_dict()["last_ids"] is None
    assert steps[2].state.as_dict()["last_ids"].items == (2, 3)
    assert steps[1].state.as_dict()["w"].shape == (3,)


def test_every_n_keeps_multiples_and_the_first_record(tmp_path):
    with recording_to(tmp_path, every=3):
        for step in range(1, 8):
            trainparity.record(step, {"step": step})
    assert [step.step for step in read_recording(tmp_path).steps] == [1, 3, 6]


def test_misuse_is_a_clear_error(tmp_path):
    with recording_to(tmp_path):
        trainparity.record(1, {"x": 1})
        with pytest.raises(TypeError, match="step must be an int"):
            trainparity.record(1.0, {"x": 1})
    with pytest.raises(RecordingError, match="already exists: record each run"):
        with recording_to(tmp_path):
            trainparity.record(1, {"x": 1})
    with pytest.raises(ValueError, match="recording mode must be one of"):
        with recording_to(tmp_path / "other", mode="sometimes"):
            pass


def run_child(code: str, environment: dict[str, str], **options):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        **options,
    )


def test_off_record_is_one_check_no_import_no_io(tmp_path):
    environment = {key: value for key, value in ONE_THREAD.items() if "TRAINPARITY" not in key}
    output = run_child(
        """
        import os, sys, time
        import trainparity
        record = trainparity.record  # import trainparity loads its names on first use
        before = set(sys.modules)
        state = {"x": 1}
        rounds = 200_000
        began = time.perf_counter()
        for step in range(rounds):
            record(step, state)
        seconds = (time.perf_counter() - began) / rounds
        print(sorted(set(sys.modules) - before), os.listdir("."), seconds)
        """,
        environment,
        cwd=tmp_path,
    )
    imported, listing, seconds = output.stdout.rsplit(" ", 2)
    assert imported == "[]" and listing == "[]"
    assert float(seconds) < 2e-6  # measured ≈ 0.05 µs; generous for a loaded machine


def test_environment_and_rank_choose_the_file(tmp_path):
    environment = {**ONE_THREAD, "TRAINPARITY_RECORD": str(tmp_path), "RANK": "3"}
    run_child(
        """
        import torch, trainparity
        for step in range(1, 4):
            trainparity.record(step, {"w": torch.full((3,), float(step))})
        """,
        environment,
    )
    assert [path.name for path in tmp_path.iterdir()] == ["rank-3.tprec"]
    recording = read_recording(tmp_path)
    assert recording.rank == 3 and len(recording.steps) == 3
    assert recording.environment["threads"]  # the fingerprint heads the file


def test_a_process_killed_mid_write_leaves_every_completed_step(tmp_path):
    environment = {**ONE_THREAD, "TRAINPARITY_RECORD": str(tmp_path)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, torch, trainparity
                small = {"w": torch.ones(4)}
                trainparity.record(1, small)
                trainparity.record(2, small)
                print("ready", flush=True)
                sys.stdin.readline()
                # 64 MiB of values in 16 tensors: written in many pieces.
                big = {f"t{index}": torch.full((1 << 20,), float(index)) for index in range(16)}
                while True:
                    trainparity.record(3, big)
                """
            ),
        ],
        env={**environment, "TRAINPARITY_RECORD_MODE": "full"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"
        path = tmp_path / "rank-0.tprec"
        completed = path.stat().st_size
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 60
        # Past the new layout frame (< 4 KiB), inside the 64 MiB step frame.
        while path.stat().st_size < completed + 4096 and time.monotonic() < deadline:
            time.sleep(0.0005)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stdin.close()
    assert child.returncode == -signal.SIGKILL
    recording = read_recording(tmp_path)
    steps = [step.step for step in recording.steps]
    assert steps[:2] == [1, 2] and set(steps[2:]) <= {3}
    assert recording.file_bytes > completed + 4096
    # The kill landed inside a step's frame (64 MiB take far longer than one poll).
    assert recording.partial_tail
    # A damaged complete frame is an error, never a silently shorter recording.
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingError, match="is damaged"):
        read_recording(tmp_path)


def test_stored_tensor_bytes_are_verified(tmp_path):
    with recording_to(tmp_path, mode="full") as path:
        trainparity.record(1, {"w": torch.arange(1024, dtype=torch.float32)})
    data = bytearray(path.read_bytes())
    needle = torch.arange(1024, dtype=torch.float32).numpy().tobytes()[400:408]
    data[data.index(needle)] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(
        RecordingError, match="tensor w of step 1 does not match its recorded digest"
    ):
        read_recording(tmp_path)
    assert read_recording(tmp_path, trust_digests=True).steps[0].step == 1
