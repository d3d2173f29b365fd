"""`python -m trainparity.quickstarts.forensics`: 1 vs 2 threads, born in a reduction, HTML report."""

from __future__ import annotations

import subprocess
import sys

from tests.chromium import chromium_binary, render_page


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

    chromium = chromium_binary()
    dom = render_page(chromium, page, tmp_path / "profile", "--dump-dom").stdout
    assert 'id="tp-outcome"' in dom and ">FAIL<" in dom
    figure = dom.split("<figure", 1)[1].split("</figure>", 1)[0]
    assert "tp-first-divergence" in figure and "first divergence: aten::" in figure
    screenshot = tmp_path / "report.png"
    render_page(
        chromium, page, tmp_path / "profile", "--window-size=1100,900", f"--screenshot={screenshot}"
    )
    assert screenshot.stat().st_size > 10_000, "the page with its figure should render"
