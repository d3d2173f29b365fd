"""record_ids with record(): every recorded ID is placed at the step during which it was consumed."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from trainparity._internal.recording.record_ids import consumption_steps, read_recorded_ids

# One process of a training loop: IDs are given before the step's record() call.
# Epoch 0 ends inside step 3 (its last ID, 5, comes before epoch 1's first
# batch); ID 9 is consumed after the last record() call. Only even steps are
# stored (every=2): the odd ones still place their IDs.
_LOOP = """
import sys
import trainparity
from trainparity._internal.recording import recording_to

ids, first_step = sys.argv[1], int(sys.argv[3])
with recording_to(sys.argv[2], every=2):
    trainparity.record(first_step, {"step": first_step})
    for step, batches in enumerate(eval(sys.argv[4]), start=first_step + 1):
        for epoch, batch in batches:
            trainparity.record_ids(batch, epoch=epoch, directory=ids)
        trainparity.record(step, {"step": step})
    trainparity.record_ids([9], epoch=1, directory=ids)
"""
_STEPS = "[[(0, [1, 2])], [(0, [3]), (0, [4])], [(0, [5]), (1, [6, 7])], [], [(1, [8])]]"


def _run(tmp_path: Path, recording: str, first_step: int, steps: str, *extra: str) -> None:
    script = tmp_path / "loop.py"
    script.write_text(_LOOP)
    completed = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ids"), str(tmp_path / recording)]
        + [str(first_step), steps, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, completed.stderr


def _marks(path: Path) -> list[tuple[int, int, int]]:
    return list(struct.iter_unpack("<qqq", path.read_bytes()))


def test_each_id_is_placed_at_the_step_of_the_next_record_call(tmp_path):
    _run(tmp_path, "run", 0, _STEPS)
    ids = tmp_path / "ids"
    assert read_recorded_ids(ids / "rank0.epoch0.ids").cast("q").tolist() == [1, 2, 3, 4, 5]
    assert read_recorded_ids(ids / "rank0.epoch1.ids").cast("q").tolist() == [6, 7, 8, 9]
    # (step, start, end): positions [start, end) were consumed during step.
    assert _marks(ids / "rank0.epoch0.steps") == [(1, 0, 2), (2, 2, 4), (3, 4, 5)]
    assert _marks(ids / "rank0.epoch1.steps") == [(3, 0, 2), (5, 2, 3)]
    epoch0, epoch1 = (
        consumption_steps(ids / "rank0.epoch0.ids"),
        consumption_steps(ids / "rank0.epoch1.ids"),
    )
    assert [epoch0.step_at(position) for position in range(5)] == [1, 1, 2, 2, 3]
    # Step 4 consumed nothing; ID 9 came after the last record() call: no step.
    assert [epoch1.step_at(position) for position in range(4)] == [3, 3, 5, None]


def test_a_later_process_appending_to_the_same_record_places_by_absolute_position(tmp_path):
    _run(tmp_path, "first", 0, "[[(1, [10, 11])]]")
    _run(tmp_path, "second", 1, "[[(1, [12])], [(1, [13, 14])]]")
    # ID 9 after each process's last record(): positions 2 and 6 have no step.
    assert _marks(tmp_path / "ids" / "rank0.epoch1.steps") == [(1, 0, 2), (2, 3, 4), (3, 4, 6)]
    steps = consumption_steps(tmp_path / "ids" / "rank0.epoch1.ids")
    assert [steps.step_at(position) for position in range(7)] == [1, 1, None, 2, 3, 3, None]


def test_without_record_no_steps_are_written_and_none_are_known(tmp_path):
    ids = tmp_path / "ids"
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, trainparity; trainparity.record_ids([1], epoch=0, "
            "directory=sys.argv[1]); trainparity.record(1, {})",
            str(ids),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    # The batch ends and optimizer step counts are always written; the step marks only by record().
    assert sorted(path.name for path in ids.iterdir()) == [
        "rank0.epoch0.batches",
        "rank0.epoch0.ids",
        "rank0.epoch0.updates",
    ]
    assert consumption_steps(ids / "rank0.epoch0.ids").step_at(0) is None
