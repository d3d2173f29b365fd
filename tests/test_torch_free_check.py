"""A warm resume check's own process never imports torch; its report's environment is still whole.

The check's process only orchestrates: the children that train, observe and
compare tensors import torch (forked from the warm server, which imported it
once). These run in a fresh interpreter, since the suite's own process has
torch imported already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from trainparity.native.dtypes import info_for_dtype, info_for_text

CHECK = """
import json, sys
from trainparity import check_resume
result = check_resume("trainparity.quickstarts.resume:CleanCase", start=sys.argv[1])
print(json.dumps({
    "outcome": result.outcome.value,
    "torch": "torch" in sys.modules,
    "environment": result.environment,
}))
"""


def _checked(start: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", CHECK, start],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.defpath, "PYTHONHASHSEED": "0", "TMPDIR": os.environ.get("TMPDIR", "/tmp")},
    )
    return json.loads(completed.stdout.splitlines()[-1])


def test_importing_trainparity_and_its_checks_imports_no_torch():
    code = (
        "import sys, trainparity\n"
        "from trainparity import check_resume, check_runs, CommandCase, Outcome, record\n"
        "import trainparity.forensics.variables, trainparity.comparison.snapshots\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.stdout.split() == ["False", "False"], completed.stderr


def test_a_warm_resume_check_runs_without_torch_and_reports_the_same_environment_keys():
    warm, fresh = _checked("warm"), _checked("fresh")
    assert warm["outcome"] == fresh["outcome"] == "PASS"
    assert warm["torch"] is False and fresh["torch"] is True
    # The torch facts come from the observer's snapshot: the same sections and library facts.
    assert sorted(warm["environment"]) == sorted([*fresh["environment"], "child_start"])
    for section in ("torch", "cuda", "python", "platform", "variables", "child_threads"):
        assert warm["environment"][section] == fresh["environment"][section], section
    assert warm["environment"]["variables"]["PYTHONHASHSEED"] == "0"


def test_the_dtype_table_matches_torch():
    for text in (
        "torch.bool", "torch.uint8", "torch.int8", "torch.int16", "torch.int32", "torch.int64",
        "torch.uint16", "torch.uint32", "torch.uint64", "torch.float16", "torch.bfloat16",
        "torch.float32", "torch.float64", "torch.complex32", "torch.complex64",
        "torch.complex128", "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz",
        "torch.float8_e5m2fnuz", "torch.float8_e8m0fnu",
    ):  # fmt: skip
        entry = info_for_text(text)
        dtype = entry.dtype
        assert str(dtype) == text
        assert entry.element_size == dtype.itemsize, text
        assert entry.is_floating == (dtype.is_floating_point or dtype.is_complex), text
        assert info_for_dtype(dtype) is entry
    assert info_for_dtype(torch.quint8) is None
