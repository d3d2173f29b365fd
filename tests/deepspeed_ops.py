"""DeepSpeed's shm comm op, JIT-built once for the whole test session.

Under DS_ACCELERATOR=cpu a rank's first `init_distributed` builds the op with
g++ (about 48 s on 2 cores). Every DeepSpeed test module builds it through
`build_shm_op` into one directory: $TORCH_EXTENSIONS_DIR when set (CI can
keep it between runs), else one directory of the session (under
pytest-xdist the workers' common parent). torch's JIT build holds a lock file
there, so workers that build at once take turns and the second finds it built.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

BUILD_SHM_OP = (
    "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
)


def extensions_directory(tmp_path_factory) -> Path:
    """Where the op is built: $TORCH_EXTENSIONS_DIR, else the session's own directory."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
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
        **os.environ,
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": str(extensions_directory(tmp_path_factory)),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMPDIR": str(root / "tmp"),
    }
    build_shm_op(environment)
    return environment


def build_shm_op(environment: Mapping[str, str]) -> None:
    """Build (or find built) the op in environment's TORCH_EXTENSIONS_DIR, before any rank needs it."""
    subprocess.run(
        [sys.executable, "-c", BUILD_SHM_OP], env=dict(environment), check=True, capture_output=True
    )
