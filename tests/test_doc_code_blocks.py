"""README's and the guides' Python blocks: complete ones run, the others say what they are.

tests/doc_blocks.py describes the markers. The complete blocks run in one
child process (one torch import for all of them), each in a fresh namespace
and a fresh working directory, so a block cannot lean on another's names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.doc_blocks import PAGES, REPO, code_blocks, excerpt_mismatch

_RUNNER = """
import contextlib, io, json, os, sys, tempfile, traceback
failures = []
for where, code in json.load(sys.stdin):
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(code, where, "exec"), {"__name__": "__main__"})
        except BaseException:
            failures.append(where + ": " + traceback.format_exc(limit=-2))
print(json.dumps(failures))
"""


def _blocks():
    return [block for page in PAGES for block in code_blocks(page)]


def test_every_marked_block_matches_its_file_and_every_fragment_says_why():
    for block in _blocks():
        if block.kind in ("file", "recipe"):
            assert block.source.is_file(), f"{block.where}: no file {block.argument}"
            assert excerpt_mismatch(block) is None, excerpt_mismatch(block)
        elif block.kind == "fragment":
            assert len(block.argument or "") > 10, f"{block.where}: say why it cannot run"


def test_every_complete_block_runs():
    complete = [(block.where, block.code) for block in _blocks() if block.kind is None]
    assert len(complete) >= 5, "the guides' complete examples went missing"
    completed = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(complete),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, completed.stderr
    failures = json.loads(completed.stdout.splitlines()[-1])
    if failures:
        pytest.fail("\n\n".join(failures))
