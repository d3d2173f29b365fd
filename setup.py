"""Builds the native core trainparity._trainparity from src/_trainparity/*.c.

Only setuptools is needed at build time. TRAINPARITY_SANITIZE=1 builds the core
with AddressSanitizer and UBSan (used by CI to test the C core).
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

CUDA_SOURCES = os.path.join("csrc", "cuda")


class build_py_with_cuda_sources(build_py):  # noqa: N801 - setuptools command naming
    """Ships csrc/cuda inside the package, so an installed trainparity can build its kernels on first use."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "trainparity", "csrc", "cuda")
        self.mkpath(target)
        for source in sorted(glob.glob(os.path.join(CUDA_SOURCES, "*"))):
            self.copy_file(source, os.path.join(target, os.path.basename(source)))


SANITIZE = os.environ.get("TRAINPARITY_SANITIZE") == "1"

compile_args = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-D_GNU_SOURCE"]
link_args = ["-pthread"]
if SANITIZE:
    compile_args += [
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
    ]
    link_args += ["-fsanitize=address,undefined"]
else:
    compile_args += ["-O3"]

native_core = Extension(
    "trainparity._trainparity",
    sources=sorted(glob.glob(os.path.join("src", "_trainparity", "*.c"))),
    depends=sorted(glob.glob(os.path.join("src", "_trainparity", "*.h"))),
    include_dirs=[os.path.join("src", "_trainparity")],
    extra_compile_args=compile_args,
    extra_link_args=link_args,
)

setup(
    package_dir={"trainparity": "python/trainparity", "trainparity.quickstarts": "quickstarts"},
    packages=[
        "trainparity",
        "trainparity._internal",
        "trainparity._internal.accumulation",
        "trainparity._internal.cases",
        "trainparity._internal.checkpoints",
        "trainparity._internal.cli",
        "trainparity._internal.comparison",
        "trainparity._internal.coverage",
        "trainparity._internal.crashes",
        "trainparity._internal.distributed",
        "trainparity._internal.executors",
        "trainparity._internal.why.forensics",
        "trainparity._internal.integrations",
        "trainparity._internal.native",
        "trainparity._internal.noise",
        "trainparity._internal.processes",
        "trainparity._internal.processes.observer",
        "trainparity._internal.processes.warm",
        "trainparity._internal.recording",
        "trainparity._internal.reports",
        "trainparity._internal.reports.sections",
        "trainparity._internal.resume",
        "trainparity._internal.runs",
        "trainparity._internal.state",
        "trainparity._internal.why",
        "trainparity.integrations",
        "trainparity.quickstarts",
    ],
    package_data={"trainparity": ["py.typed"]},
    ext_modules=[native_core],
    cmdclass={"build_py": build_py_with_cuda_sources},
)
