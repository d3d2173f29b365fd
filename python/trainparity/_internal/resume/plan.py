"""`trainparity resume --plan-only DIR`: each phase as a command and a shell script, run by anyone.

The plan holds what a scheduler needs: each phase's argv, working
directory, the variables the check would add to its environment (the
caller's `environment`, and where `record()` and `record_ids` write), its expected
checkpoint, and the phase it waits for (candidate_resume stages
candidate_split's checkpoint first, as the check does). Every run directory
is under DIR, so the phases' outputs land where `trainparity judge DIR`
(executors/replay.py) reads them. Paths are absolute: run the scripts on
machines that see DIR at the same path. Each script also records the
fingerprint of the machine that ran its phase (`trainparity env --json`
with the planning interpreter, where it exists there), which judge compares.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.cases.command_case import CommandCase, case_names, resumes_by_itself
from trainparity._internal.comparison.policies import ComparisonPolicy, ToleranceComparison
from trainparity._internal.distributed.phases import ids_path
from trainparity._internal.executors.replay import PHASE_RESULT_FILE, PLAN_FILE
from trainparity._internal.processes.child_environment import phase_cwd
from trainparity._internal.processes.children import validated_command
from trainparity._internal.protocols import ProcessExecutionPlan
from trainparity._internal.recording.record_ids import IDS_DIR_VARIABLE
from trainparity._internal.resume.check import resume_case_setup
from trainparity._internal.resume.execution import resume_phases
from trainparity._internal.resume.recordings import phase_recording_environment

__all__ = ["PHASE_ENVIRONMENT_FILE", "PLAN_FILE", "write_plan"]

# Each script records the fingerprint of the machine that ran its phase, for judge's leads.
PHASE_ENVIRONMENT_FILE = "environment.json"
PLAN_SCHEMA_VERSION = 1


def write_plan(
    case: str | CommandCase,
    directory: Path,
    *,
    cwd: Path,
    environment: Mapping[str, str] | None = None,
    comparison: ComparisonPolicy | None = None,
    split_steps: Sequence[int] | None = None,
    world_sizes: Sequence[int] | None = None,
    layouts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Write DIR/plan.json and DIR/<phase>.sh for every phase of a resume check; return the plan.

    `split_steps`, `world_sizes` and `layouts` are check_resume's. Raises the check's
    setup errors (CaseSetupError for the user's input).
    """
    loaded, _, chain = resume_case_setup(case, environment, split_steps, world_sizes, layouts)
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    reported, spec = case_names(case)
    split_steps = [link.from_step for link in chain[1:]]
    # Each resumed phase loads what the phase before it in the chain saved, staged first.
    loads_from = {
        link.name: before.name for before, link in zip(chain[:-1], chain[1:], strict=True)
    }
    phases = []
    for name, end_step, world_size, layout in resume_phases(loaded, chain):
        run_dir = root / name
        before = loads_from.get(name)
        staged = loaded.checkpoint_path(run_dir) if before else None
        # A job that resumes by itself is told nothing: it finds the staged checkpoint.
        resume_from = None if resumes_by_itself(loaded) else staged
        plan = ProcessExecutionPlan(name, cwd, run_dir, end_step, resume_from, world_size, layout)
        argv = validated_command(loaded.command(plan))
        variables = {
            **dict(environment or {}),
            **phase_recording_environment(root, name, split_steps),
            # Where record_ids writes, as a check's own launch sets it: judge reads the IDs.
            IDS_DIR_VARIABLE: str(ids_path(run_dir)),
        }
        phase = {
            "name": name,
            "end_step": end_step,
            "run_dir": str(run_dir),
            "cwd": str(phase_cwd(loaded, plan)),
            "argv": argv,
            "environment": dict(sorted(variables.items())),
            "checkpoint": str(loaded.checkpoint_path(run_dir)),
            "result": str(run_dir / PHASE_RESULT_FILE),
            "after": [before] if before else [],
            "script": f"{name}.sh",
        }
        staging = (loaded.checkpoint_path(root / before), staged) if before and staged else None
        # A job that resumes by itself would resume from whatever is at its checkpoint path.
        cleared = resumes_by_itself(loaded) and staging is None
        script = root / phase["script"]
        script.write_text(_script(phase, cwd, staging, cleared=cleared), encoding="utf-8")
        script.chmod(0o755)
        phases.append(phase)
    plan = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "check": "resume",
        "case": reported,
        "case_spec": spec,
        "cwd": str(cwd),
        "comparison": _tolerance(comparison),
        "environment": dict(sorted(dict(environment or {}).items())),
        "phases": phases,
    }
    # A chain or an elastic resume: what `trainparity judge` hands check_resume again.
    given_keys = (("split_steps", split_steps), ("world_sizes", world_sizes), ("layouts", layouts))
    for key, given in given_keys:
        if given is not None:
            plan[key] = list(given)
    (root / PLAN_FILE).write_text(
        json.dumps(plan, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return plan


def _tolerance(comparison: ComparisonPolicy | None) -> dict[str, Any] | None:
    """The tolerance `trainparity judge` compares with (None: exact)."""
    if not isinstance(comparison, ToleranceComparison):
        return None
    return {"atol": comparison.atol, "equal_nan": comparison.equal_nan, "rtol": comparison.rtol}


def _script(
    phase: dict[str, Any], cwd: Path, staging: tuple[Path, Path] | None, *, cleared: bool
) -> str:
    quote = shlex.quote
    run_dir, result = quote(phase["run_dir"]), quote(phase["result"])
    environment = quote(str(Path(phase["run_dir"]) / PHASE_ENVIRONMENT_FILE))
    lines = [
        "#!/bin/sh",
        f"# Phase {phase['name']} of a trainparity resume check (plan.json beside this script).",
        "# Run it where this directory has the same path; then: trainparity judge <this directory>",
        f"cd {quote(str(cwd))} || exit 1",
        f"mkdir -p {run_dir} || exit 1",
        f"rm -f {result}",
    ]
    if phase["cwd"] != str(cwd):  # CommandCase(cwd="{run_dir}"), as child_environment.py runs it
        lines += [
            f"cd {quote(phase['cwd'])} || exit 1",
            f'export PYTHONPATH={quote(str(cwd))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        ]
    if cleared:
        lines += [
            "# The job resumes by itself from what it finds here: it starts from nothing.",
            f"rm -rf {quote(phase['checkpoint'])} || exit 1",
        ]
    if staging is not None:
        source, target = (quote(str(path)) for path in staging)
        lines += [
            f"# The check stages {phase['after'][0]}'s checkpoint where this phase resumes from.",
            f'[ -e {source} ] || {{ echo "run {phase["after"][0]}.sh first: no {source}" >&2; exit 1; }}',
            f"rm -rf {target} && mkdir -p {quote(str(staging[1].parent))} && cp -R {source} {target} || exit 1",
        ]
    assignments = [f"{key}={value}" for key, value in phase["environment"].items()]
    command = " ".join(quote(item) for item in ["env", *assignments, *phase["argv"]])
    environment_command = " ".join(quote(item) for item in ["env", *assignments, sys.executable])
    lines += [
        f"{command} >{run_dir}/stdout.log 2>{run_dir}/stderr.log &",
        "pid=$!",
        'wait "$pid"',
        "status=$?",
        "# The machine's fingerprint, for the leads of `trainparity judge` (best effort).",
        f"{environment_command} -m trainparity env --json >{environment} 2>/dev/null"
        f" || rm -f {environment}",
        f'printf \'{{"exit_code": %d, "pid": %d}}\\n\' "$status" "$pid" >{result}.tmp && mv {result}.tmp {result}',
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)
