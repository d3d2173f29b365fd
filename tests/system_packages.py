"""The system packages some tests need: skip once-worded where they are missing, fail under CI.

`make test` and .ci/run install them first where the machine allows
(.ci/system-packages.sh). Elsewhere every test that needs a missing package skips
with the same reason, raised from this one place, so pytest's summary folds them
into one line that names what to install. Under CI=true a missing package is a
failure: CI installs them, so their absence there is a broken set-up, not a skip.
"""

from __future__ import annotations

import os
import shutil

import pytest

# Each Debian package, and the commands whose absence means it is missing.
PACKAGE_COMMANDS = {
    "chromium": (("chromium", "chromium-browser", "google-chrome"),),
    "slurm-wlm": (("slurmctld",), ("slurmd",), ("sbatch",), ("squeue",)),
    "munge": (("munged",),),
}


def missing_packages() -> list[str]:
    """The packages of PACKAGE_COMMANDS with a command that no name of is on PATH."""
    return [
        package
        for package, commands in PACKAGE_COMMANDS.items()
        if any(not any(shutil.which(name) for name in names) for names in commands)
    ]


def require_packages(*packages: str) -> None:
    """Skip (fail under CI=true) unless every one of `packages` is installed."""
    missing = missing_packages()
    if not any(package in missing for package in packages):
        return
    # One reason for every such test, whichever package it needs: one summary line.
    reason = (
        f"system packages missing here: {' '.join(missing)}; install them with "
        f"`sudo apt-get install {' '.join(missing)}` or `sudo bash .ci/system-packages.sh`"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: CI must install them)", pytrace=False)
    pytest.skip(reason)
