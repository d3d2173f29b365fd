"""Cases given as classes: an importable class by its module path, any other class by value.

`check_resume(MyCase)`, `check_runs(MyCase, ...)` and `check_accumulation(MyCase, ...)`
accept the class. A class the children can import is loaded by them as its
"module:QualName" spec would be; a class defined in `__main__` (a script, a
notebook cell) or in a function goes to the observer and the workers pickled
by value (cloudpickle) in the check's run directory. The report's `case`
says which. The scripts here run as `python script.py` in their own process,
so their classes really live in `__main__`.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trainparity
from trainparity._internal.accumulation.check import AccumulationExecutionPlan
from trainparity._internal.cases.case_class import BY_VALUE_FILE, importable_spec
from trainparity._internal.cases.loading import CaseImportError, load_process_case
from trainparity._internal.comparison.policies import ToleranceComparison

from tests.fixtures.accumulation_cases import LinearCase
from tests.fixtures.process_resume_cases import (
    CandidateLargeDifferenceProcessCase,
    DeterministicProcessCase,
)
from tests.fixtures.runs_cases import ToyRuns

REPOSITORY = Path(__file__).resolve().parent.parent
TINY_TRAIN = REPOSITORY / "docs" / "examples" / "tiny_train.py"


class Outer:
    class Inner(DeterministicProcessCase):
        """A nested class: its spec's attribute is dotted ("module:Outer.Inner")."""


# A script whose case class lives in __main__ and uses what the script has around it: a
# function of its own (by value), torch (by reference) and a module next to the script
# (by reference: the children find it because the script's directory is on their path).
SCRIPT = """
import json, sys
from pathlib import Path

import torch
import trainparity
import script_helpers

TINY_TRAIN = {tiny_train!r}


def checkpoint_name():
    return "checkpoint.pt"


class ScriptCase:
    name = "script_case"
    split_step = 2
    total_step = 4

    def command(self, plan):
        argv = [sys.executable, TINY_TRAIN, "--checkpoint", str(self.checkpoint_path(plan.run_dir)),
                "--end-step", str(plan.end_step)]
        if plan.resume_from is not None:
            argv += ["--resume", str(plan.resume_from)]
        return argv

    def checkpoint_path(self, run_dir):
        return Path(run_dir) / checkpoint_name()

    def observe_checkpoint(self, path):
        return script_helpers.observed(torch.load(path, weights_only=True))


{before_check}
result = trainparity.check_resume(ScriptCase, work_dir=Path(sys.argv[1]), timeout=120)
print(json.dumps({{key: getattr(result, key) for key in ("outcome", "message", "case", "usage_error")}}, default=str))
"""

HELPERS = """
def observed(checkpoint):
    return {"model": checkpoint["model"], "optimizer": checkpoint["optimizer"], "step": checkpoint["step"]}
"""


def _run_script(tmp_path: Path, before_check: str = "") -> tuple[dict, Path]:
    """Run SCRIPT as `python script.py WORK_DIR` from another directory; its result's fields."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "script_helpers.py").write_text(HELPERS, encoding="utf-8")
    script = scripts / "check_script.py"
    script.write_text(
        SCRIPT.format(tiny_train=str(TINY_TRAIN), before_check=before_check), encoding="utf-8"
    )
    elsewhere = tmp_path / "elsewhere"  # the check's cwd: script_helpers is not importable here
    elsewhere.mkdir()
    work_dir = tmp_path / "work"
    completed = subprocess.run(
        [sys.executable, str(script), str(work_dir)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1]), work_dir


@pytest.mark.both_start_modes  # a warm observer unpickles it in a forked child
def test_a_class_defined_in_a_script_goes_to_the_children_by_value(tmp_path):
    fields, work_dir = _run_script(tmp_path)
    assert fields["outcome"] == "PASS", fields["message"]
    assert fields["case"] == "<by value> __main__.ScriptCase"
    # The observer read the class from the check's run directory.
    assert (work_dir / BY_VALUE_FILE).is_file()


def test_a_plain_install_brings_cloudpickle():
    """A class in a script or a notebook needs no extra: cloudpickle is a dependency."""
    requirements = importlib.metadata.requires("trainparity") or []
    unconditional = [r for r in requirements if "extra ==" not in r]
    assert any(r.startswith("cloudpickle") for r in unconditional), requirements


def test_without_cloudpickle_a_class_in_main_is_a_setup_error_that_says_what_to_install(
    tmp_path,
):
    # None in sys.modules makes `import cloudpickle` raise ImportError, as when it is not installed.
    fields, work_dir = _run_script(tmp_path, before_check="sys.modules['cloudpickle'] = None")
    assert fields["outcome"] == "ERROR"
    assert fields["usage_error"] == "case"
    assert "pip install cloudpickle" in fields["message"]
    assert fields["message"].startswith(
        "process case setup failed: ScriptCase is defined in __main__"
    )
    assert not work_dir.exists()  # nothing ran


def test_an_importable_class_is_loaded_by_its_module_path_as_its_spec_is(tmp_path):
    result = trainparity.check_resume(
        CandidateLargeDifferenceProcessCase, cwd=REPOSITORY, work_dir=tmp_path / "work"
    )
    assert result.case == "tests.fixtures.process_resume_cases:CandidateLargeDifferenceProcessCase"
    by_spec = trainparity.check_resume(result.case, cwd=REPOSITORY)
    assert (result.outcome, result.message) == (by_spec.outcome, by_spec.message)
    assert result.outcome == "FAIL"
    assert not (tmp_path / "work" / BY_VALUE_FILE).exists()


def test_a_class_defined_in_a_function_goes_by_value_to_check_runs(tmp_path):
    class DoubledRuns(ToyRuns):
        name = "doubled_runs"
        variants = {"unit": {}, "double": {"env": {"TOY_SCALE": "2"}}}

    result = trainparity.check_runs(DoubledRuns, cwd=REPOSITORY, work_dir=tmp_path / "work")
    assert result.case == f"<by value> {__name__}.{DoubledRuns.__qualname__}"
    assert result.outcome == "FAIL", result.message
    assert result.message.startswith("variants unit and double first differ")
    assert (tmp_path / "work" / BY_VALUE_FILE).is_file()


def test_a_class_defined_in_a_function_goes_by_value_to_the_accumulation_workers(tmp_path):
    class LocalLinearCase(LinearCase):
        name = "local_linear"

    result = trainparity.check_accumulation(
        LocalLinearCase,
        candidate=AccumulationExecutionPlan(2),
        comparison=ToleranceComparison(
            rtol=1e-5, atol=1e-6
        ),  # two microbatches sum in another order
        cwd=REPOSITORY,
        work_dir=tmp_path / "work",
    )
    assert result.outcome == "PASS", result.message
    assert result.case == f"<by value> {__name__}.{LocalLinearCase.__qualname__}"
    assert len(set(result.process_ids)) == 3  # three workers, each unpickled the class
    assert (tmp_path / "work" / BY_VALUE_FILE).is_file()


def test_a_class_that_cannot_be_pickled_is_a_setup_error_before_anything_runs(tmp_path):
    class LockedCase(DeterministicProcessCase):
        lock = threading.Lock()

    result = trainparity.check_resume(LockedCase, work_dir=tmp_path / "work")
    assert result.outcome == "ERROR"
    assert result.usage_error == "case"
    assert "cannot be sent to the check's processes by value" in result.message
    assert "lock" in result.message
    assert not (tmp_path / "work").exists()


def test_an_instance_instead_of_its_class_says_to_pass_the_class():
    result = trainparity.check_resume(DeterministicProcessCase())
    assert result.outcome == "ERROR"
    assert result.message == (
        "process case setup failed: case must use the form 'package.module:ClassName', or be "
        "a case class or a CommandCase, not an instance of DeterministicProcessCase "
        "(pass the class itself)"
    )
    assert result.case == "<not a case: DeterministicProcessCase>"


def test_a_nested_class_is_importable_by_its_dotted_name():
    assert importable_spec(Outer.Inner) == f"{__name__}:Outer.Inner"
    assert isinstance(load_process_case(f"{__name__}:Outer.Inner"), Outer.Inner)


def test_a_report_case_that_went_by_value_cannot_be_loaded_by_name_and_says_why():
    with pytest.raises(CaseImportError, match=r"pass the class again, e\.g\. explain"):
        load_process_case("<by value> __main__.MyCase")


def test_main_and_local_classes_are_not_importable_and_module_classes_are():
    class Local:
        pass

    assert importable_spec(Local) is None
    assert importable_spec(DeterministicProcessCase) == (
        "tests.fixtures.process_resume_cases:DeterministicProcessCase"
    )
    redefined = type(
        "DeterministicProcessCase", (), {"__module__": DeterministicProcessCase.__module__}
    )
    assert importable_spec(redefined) is None  # its name leads to another class
    main_class = type("MainCase", (), {"__module__": "__main__"})
    assert importable_spec(main_class) is None
