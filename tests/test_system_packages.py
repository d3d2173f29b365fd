"""Tests that need a system package skip with one summary line where it is missing, fail under CI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.system_packages import PACKAGE_COMMANDS, missing_packages

REPO = Path(__file__).resolve().parent.parent

NEEDING = textwrap.dedent(
    """
    from tests.chromium import chromium_binary
    from tests.system_packages import require_packages

    def test_renders_a_report():
        chromium_binary()

    def test_renders_another():
        chromium_binary()

    def test_runs_slurm():
        require_packages("slurm-wlm", "munge")
    """
)


def _pytest_without_packages(tmp_path: Path, **environment: str) -> subprocess.CompletedProcess:
    """The tests above under a PATH with only this interpreter's directory: nothing installed."""
    (tmp_path / "test_needing.py").write_text(NEEDING)
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "PYTHONPATH")}
    env.update(PATH=str(Path(sys.executable).parent), PYTHONPATH=str(REPO), **environment)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(tmp_path / "test_needing.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_missing_packages_skip_with_one_summary_line_that_says_what_to_install(tmp_path):
    completed = _pytest_without_packages(tmp_path)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "3 skipped" in completed.stdout
    skipped = [line for line in completed.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, skipped
    assert skipped[0].startswith("SKIPPED [3]")
    assert "sudo apt-get install chromium slurm-wlm munge" in skipped[0]


def test_under_ci_a_missing_package_fails_instead(tmp_path):
    completed = _pytest_without_packages(tmp_path, CI="true")
    assert completed.returncode == 1
    assert "3 failed" in completed.stdout
    assert "CI must install them" in completed.stdout


def test_this_machine_reports_what_it_has(monkeypatch):
    # Nothing on PATH: every package is missing; the real PATH: the real answer, which CI
    # (which installs them all) requires to be empty.
    monkeypatch.setenv("PATH", "")
    assert missing_packages() == list(PACKAGE_COMMANDS)
    monkeypatch.undo()
    if os.environ.get("CI") == "true":
        assert missing_packages() == []


def test_the_install_script_names_the_same_packages():
    script = (REPO / ".ci" / "system-packages.sh").read_text()
    for package, commands in PACKAGE_COMMANDS.items():
        assert f"missing+=({package})" in script
        for names in commands:
            assert names[0] in script


def test_make_test_and_ci_both_run_the_install_script():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "bash .ci/system-packages.sh" in recipe
    assert "bash .ci/system-packages.sh" in (REPO / ".ci" / "run").read_text()
