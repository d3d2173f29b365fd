"""A warm check's own process never imports torch; its report's environment is still whole.

The check's process only orchestrates: the children that train, observe and
compare tensors import torch (forked from the warm server, which imported it
once). These run in a fresh interpreter, since the suite's own process has
torch imported already. Both checks' quickstart cases import torch only
where they train.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from trainparity._internal.native.dtypes import info_for_dtype, info_for_text

CHECKS = {
    "resume": """
from trainparity import check_resume
result = check_resume("trainparity.quickstarts.resume:CleanCase", start=sys.argv[1])
""",
    "accumulation": """
from trainparity import check_accumulation
from trainparity.accumulation import AccumulationExecutionPlan
from trainparity._internal.comparison.policies import ToleranceComparison
result = check_accumulation(
    "trainparity.quickstarts.accumulation:Case",
    candidate=AccumulationExecutionPlan(2),
    comparison=ToleranceComparison(rtol=1e-6, atol=1e-7),
    start=sys.argv[1],
)
""",
}
REPORTED = """
print(json.dumps({
    "outcome": result.outcome.value,
    "torch": "torch" in sys.modules,
    "environment": result.environment,
}))
"""


# The suite's temporary root, and torch's cache kept where the suite put it (tests/temp_guard.py):
# an accumulation worker's optimizer imports torch._inductor, which makes that directory.
_KEPT = {
    name: os.environ[name] for name in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR") if name in os.environ
}


def _checked(check: str, start: str) -> dict:
    code = "import json, sys\n" + CHECKS[check] + REPORTED
    completed = subprocess.run(
        [sys.executable, "-c", code, start],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.defpath, "PYTHONHASHSEED": "0", **_KEPT},
    )
    return json.loads(completed.stdout.splitlines()[-1])


def test_importing_trainparity_and_its_checks_imports_no_torch():
    code = (
        "import sys, trainparity\n"
        "from trainparity import check_resume, check_runs, CommandCase, Outcome, record\n"
        "from trainparity import check_accumulation\n"
        "import trainparity._internal.accumulation.check, trainparity._internal.accumulation.execution\n"
        "import trainparity._internal.why.forensics.variables, trainparity._internal.comparison.snapshots\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.stdout.split() == ["False", "False"], completed.stderr


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_a_warm_check_runs_without_torch_and_reports_the_same_environment_keys(check):
    warm, fresh = _checked(check, "warm"), _checked(check, "fresh")
    assert warm["outcome"] == fresh["outcome"] == "PASS"
    assert warm["torch"] is False and fresh["torch"] is True
    # The torch facts come from a child's snapshot (the observer's, or an accumulation
    # worker's observations): the same sections and library facts.
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
