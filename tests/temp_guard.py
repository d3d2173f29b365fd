"""The suite leaves no temporary files behind: every test's scratch space is accounted for.

The session runs with its own temporary root (TMPDIR, inherited by every child a test
starts). At the end, anything left there besides pytest's own `pytest-of-*` base and
torch's compile cache is a leak: a fixture, a child process or a library call that used
`tempfile` and did not clean up. The session then fails, naming the leftovers; otherwise
the root is removed.

torch's cache is given a fixed place in the root (TORCHINDUCTOR_CACHE_DIR): importing
torch._dynamo, which torch.optim does on a process's first optimizer, creates it, by
default as `$TMPDIR/torchinductor_$USER`, and keeps it by design.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_VARIABLE = "TRAINPARITY_SUITE_TMP"
_TORCH_CACHE = "torch-compile-cache"


def start(config: pytest.Config) -> None:
    """Give the session a temporary root of its own (not when a run nests in another)."""
    if os.environ.get(_VARIABLE):
        return
    root = Path(tempfile.mkdtemp(prefix="trainparity-suite-")).resolve()
    # Searchable by others, as the system's temporary directory is: munged (tests/slurm_cluster.py)
    # refuses a socket under a directory that other users cannot traverse.
    root.chmod(0o755)
    os.environ[_VARIABLE] = str(root)
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / _TORCH_CACHE))
    config.stash[_ROOT] = root


def finish(session: pytest.Session, exitstatus: int) -> None:
    root = session.config.stash.get(_ROOT, None)
    if root is None:
        return
    leftovers = sorted(
        entry.name
        for entry in root.iterdir()
        if not entry.name.startswith("pytest-of-") and entry.name != _TORCH_CACHE
    )
    if leftovers:
        session.config.stash[_LEFTOVERS] = (root, leftovers)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif exitstatus == pytest.ExitCode.OK:
        shutil.rmtree(root, ignore_errors=True)


def summary(terminalreporter, config: pytest.Config) -> None:
    found = config.stash.get(_LEFTOVERS, None)
    if found is not None:
        root, leftovers = found
        terminalreporter.section("temporary files left behind", red=True)
        terminalreporter.write_line(
            f"the suite left {len(leftovers)} entries in its temporary root {root} "
            "(find the test or child that created them and clean up after it):"
        )
        for name in leftovers[:20]:
            terminalreporter.write_line(f"  {name}")


_ROOT = pytest.StashKey[Path]()
_LEFTOVERS = pytest.StashKey[tuple]()
