"""DeepSpeed's shm comm op, JIT-built once: at set-up (`make venv`), else once per test session.

Under DS_ACCELERATOR=cpu a rank's first `init_distributed` builds the op with
g++ (about 45 s of CPU). It is a build product of the installed DeepSpeed,
like the package's own C extension, so `make venv` builds it into the venv
(`python -m tests.deepspeed_ops`, into VENV_EXTENSIONS) and the suite finds
it there. Every DeepSpeed test module goes through `build_shm_op` into one
directory: $TORCH_EXTENSIONS_DIR when set, else the venv's when set-up built
the op there, else one directory of the session (under pytest-xdist the
workers' common parent). torch's JIT build holds a lock file there, so
workers that build at once take turns and the second finds it built; a
DeepSpeed or torch that changed since set-up is rebuilt in the same place.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

BUILD_SHM_OP = (
    "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
)


# What a DeepSpeed module's warm servers import ahead of its ranks (the warm_preload marker,
# tests/conftest.py): every rank imports deepspeed, and through its Muon optimizer module
# torch._inductor's compile_fx (0.9 s of CPU per rank), and builds an optimizer (torch._dynamo).
DEEPSPEED_PRELOADS = ("torch._dynamo", "torch._inductor.compile_fx", "deepspeed")

# Where `make venv` builds the op: inside the venv, removed with it.
VENV_EXTENSIONS = Path(sys.prefix) / "torch_extensions"
_BUILT_AT_SET_UP = VENV_EXTENSIONS / "built"  # written once the set-up build succeeded


def extensions_directory(tmp_path_factory) -> Path:
    """Where the op is built: $TORCH_EXTENSIONS_DIR, the venv's (built at set-up), else the session's."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    if _BUILT_AT_SET_UP.is_file():
        return VENV_EXTENSIONS
    base = tmp_path_factory.getbasetemp()
    session = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return session / "deepspeed_torch_extensions"


def deepspeed_environment(tmp_path_factory, root: Path) -> dict[str, str]:
    """The checks' environment for DeepSpeed on CPU ranks, the shm op built before it is returned.

    One thread per rank; the op's build directory shared by the session; this
    interpreter's bin folder first on PATH (a template's `torchrun` or
    `deepspeed` is looked up there, and so is the `ninja` torch builds the op
    with: every process that may build it must find the same one, since pip's
    ninja and the system's cannot read each other's build log and rebuild the
    op, 40 s of CPU each time); temporary files under `root / "tmp"`.
    """
    (root / "tmp").mkdir()
    environment = {
        **_build_environment(extensions_directory(tmp_path_factory)),
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(root / "tmp"),
    }
    build_shm_op(environment)
    return environment


def _build_environment(extensions: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DS_ACCELERATOR": "cpu",
        "TORCH_EXTENSIONS_DIR": str(extensions),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


# The extensions directories this process has built the op in, or found it built: finding it
# built imports deepspeed and checks the build (2.4 s of CPU), once per module fixture before,
# 14 times a suite. The op, DeepSpeed, torch and PATH's ninja stay as they are for a process.
_READY_IN: set[str] = set()


def build_shm_op(environment: Mapping[str, str]) -> None:
    """Build (or find built) the op in environment's TORCH_EXTENSIONS_DIR, before any rank needs it."""
    directory = environment.get("TORCH_EXTENSIONS_DIR", "")
    if directory in _READY_IN:
        return
    subprocess.run(
        [sys.executable, "-c", BUILD_SHM_OP], env=dict(environment), check=True, capture_output=True
    )
    _READY_IN.add(directory)


def build_at_set_up() -> int:
    """`make venv`: build the op into the venv, where the suite looks first; 0 without DeepSpeed.

    A failed build is reported and not fatal: the DeepSpeed tests then build it
    themselves and fail with the compiler's error where it matters.
    """
    if importlib.util.find_spec("deepspeed") is None:
        print("DeepSpeed is not installed: no shm op to build")
        return 0
    VENV_EXTENSIONS.mkdir(exist_ok=True)
    _BUILT_AT_SET_UP.unlink(missing_ok=True)
    try:
        build_shm_op(_build_environment(VENV_EXTENSIONS))
    except subprocess.CalledProcessError as error:
        print(
            "warning: DeepSpeed's shm op did not build (the DeepSpeed tests will try again):\n"
            + error.stderr.decode(errors="replace")[-2000:],
            file=sys.stderr,
        )
        return 0
    _BUILT_AT_SET_UP.write_text("DeepSpeed's shm op, built by `make venv`\n")
    print(f"DeepSpeed's shm op is built in {VENV_EXTENSIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(build_at_set_up())
