"""record_ids and track_ids work where NumPy cannot be imported (issue 50, finding 7).

NumPy is not a dependency of trainparity, and torch runs without it, but
`Tensor.numpy()` then raises "Numpy is not available": every child that
recorded IDs once crashed at its first flush. Here the children's NumPy is
made unimportable by a `sitecustomize.py` on their PYTHONPATH (it wraps the
meta-path finders so that none finds `numpy`, before torch is imported).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trainparity
from trainparity import Outcome
from trainparity._internal.recording.record_ids import batch_ends, recorded_ids

REPO_ROOT = Path(__file__).resolve().parents[1]
ONE_SERVER = {"PYTHONHASHSEED": "0", "TRAINPARITY_WARM_PRELOAD": "torch._dynamo"}
BLOCKER = r'''"""Makes NumPy unimportable in this interpreter, as on a machine without it.

Every finder on sys.meta_path is wrapped to find nothing named numpy, so
`import numpy` raises ModuleNotFoundError and `importlib.util.find_spec`
returns None, as they do where NumPy is not installed.
"""

import os
import sys


class _HidingNumpy:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            with open(os.environ["NO_NUMPY_LOG"], "a") as log:  # which processes it hid NumPy from
                log.write(f"{os.getpid()}\n")
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_HidingNumpy(finder) for finder in sys.meta_path]
'''
RECORDING = """
import json, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainparity import record_ids
from trainparity.distributed import flush_ids, track_ids

directory = sys.argv[1]
ids = torch.arange(10)
record_ids(ids, epoch=0, directory=directory)  # a tensor that owns its storage (held, joined later)
record_ids(ids[2:5], epoch=0, directory=directory)  # a view: converted at once
record_ids(torch.tensor([7, 8], dtype=torch.int32), epoch=0, directory=directory)
record_ids([1, 2], epoch=1, directory=directory)  # the epoch change flushes epoch 0
loader = DataLoader(TensorDataset(torch.arange(20, 26)), batch_size=4)
for epoch in (2, 3):
    for _batch in track_ids(loader, id_of=lambda batch: batch[0], epoch=epoch, directory=directory):
        pass
flush_ids()
print(json.dumps({"numpy": "numpy" in sys.modules}))
"""


def _blocked_environment(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "no_numpy"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "blocked.log"
    return {"PYTHONPATH": str(blocker), "OMP_NUM_THREADS": "1", "NO_NUMPY_LOG": str(log)}


def _blocked_processes(tmp_path: Path) -> set[str]:
    return set((tmp_path / "blocked.log").read_text().split())


def test_the_blocker_really_hides_numpy(tmp_path):
    environment = _blocked_environment(tmp_path)
    completed = subprocess.run(
        [sys.executable, "-c", "import numpy"],
        env={**_base_environment(), **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    assert "ModuleNotFoundError: No module named 'numpy'" in completed.stderr


def _base_environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def test_record_ids_and_track_ids_record_every_kind_of_ids_without_numpy(tmp_path):
    records = tmp_path / "ids"
    completed = subprocess.run(
        [sys.executable, "-c", RECORDING, str(records)],
        env={**_base_environment(), **_blocked_environment(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.splitlines()[-1]) == {"numpy": False}
    assert len(_blocked_processes(tmp_path)) == 1  # torch tried NumPy, and got none
    read = {epoch: recorded_ids(records, epoch)[0].cast("q").tolist() for epoch in range(4)}
    assert read == {
        0: [*range(10), 2, 3, 4, 7, 8],
        1: [1, 2],
        2: [20, 21, 22, 23, 24, 25],
        3: [20, 21, 22, 23, 24, 25],
    }
    assert batch_ends(records / "rank0.epoch0.ids").tolist() == [10, 13, 15]
    assert batch_ends(records / "rank0.epoch2.ids").tolist() == [4, 6]


def test_check_resume_children_without_numpy_complete_with_the_right_verdict(tmp_path):
    # The fast-forward job's resume that trains its epoch again: every phase records IDs
    # (track_ids) across an epoch change, and only a complete record names the repeat.
    runs = tmp_path / "runs"
    runs.mkdir()
    result = trainparity.check_resume(
        "tests.fixtures.fast_forward_cases:ReplayCase",
        cwd=REPO_ROOT,
        # Forked from one server that imported torch where NumPy was hidden: the children's
        # torch has no NumPy, as a fresh one would, at a fraction of the imports' cost.
        environment={**_blocked_environment(tmp_path), **ONE_SERVER},
        start="warm",
        temporary_root=runs,
        timeout=600,  # a phase's limit: generous, so a loaded machine cannot change a verdict
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.message == "first observed divergence at step 10: coverage.epoch1.rank0"
    assert result.primary_difference.reason == "sample_repeated"
    assert "(candidate_resume's position 0 during step 10)" in result.primary_difference.candidate
    assert _blocked_processes(tmp_path)  # the server's import of torch looked for NumPy
    assert result.environment["child_start"]["warm"], result.environment["child_start"]
