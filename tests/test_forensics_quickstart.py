"""`python -m trainparity.quickstarts.forensics`: 1 vs 2 threads, born in a reduction, HTML report."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def test_quickstart_finds_the_reduction_and_chromium_shows_its_report(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "trainparity.quickstarts.forensics", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert completed.stdout.startswith("FAIL: first divergence at aten::")
    assert "born there (its inputs are bit-identical)" in completed.stdout.splitlines()[0]
    assert "threads.torch_intra_op" in completed.stdout
    page = tmp_path / "forensics-report.html"
    html = page.read_text()
    assert "<svg" in html and "tp-first-divergence" in html and "<script" not in html

    chromium = next(
        (found for name in ("chromium", "chromium-browser", "google-chrome")
         if (found := shutil.which(name))),
        None,
    )  # fmt: skip
    if chromium is None:
        pytest.skip("headless Chromium is not installed here (CI installs Debian's chromium)")
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]  # fmt: skip
    dom = subprocess.run(
        [*command, "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert 'id="tp-outcome"' in dom and ">FAIL<" in dom
    figure = dom.split("<figure", 1)[1].split("</figure>", 1)[0]
    assert "tp-first-divergence" in figure and "first divergence: aten::" in figure
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [*command, "--window-size=1100,900", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert screenshot.stat().st_size > 10_000, "the page with its figure should render"
