"""`trainparity judge` reads what each planned phase recorded (record(), record_ids), not only its checkpoint.

A phase run by its plan script leaves its recordings under DIR/recordings/<phase>
and its sample IDs under DIR/<phase>/ids; judge must compare them as a check that
ran the phases does. Before, judge emptied each phase's recording and ID
directories as if about to launch it (what a kept work_dir's stale records need),
so a recorded fault was judged on its final checkpoints alone (FAIL at the last
step, no trajectory); and the plan did not tell record_ids where to write, so a
planned phase recorded no IDs and the order of its samples went unchecked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trainparity._internal.cli.main import main

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "cosine_schedule_train.py"
SAMPLE_SCRIPT = Path(__file__).resolve().parent / "fixtures" / "sample_position_job.py"
PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def run_phases(plan: Path) -> None:
    """Run the plan's phase scripts, one after another, but baseline_b's: a copy of baseline_a's.

    candidate_resume needs candidate_split's output. The two baselines are one deterministic
    command (their scripts differ only in the phase's name, asserted here), so running the
    second proves nothing the first does not: its outputs, recordings and IDs are baseline_a's,
    copied where baseline_b.sh leaves them (tests/shared_baselines.py copies a clean check's
    phases the same way). Each phase is an interpreter that imports torch, and another for
    the machine's fingerprint.
    """
    script_a = (plan / "baseline_a.sh").read_text(encoding="utf-8")
    script_b = (plan / "baseline_b.sh").read_text(encoding="utf-8")
    assert script_b == script_a.replace("baseline_a", "baseline_b")
    for phase in PHASES:
        if phase == "baseline_b":
            shutil.copytree(plan / "baseline_a", plan / phase)
            if (plan / "recordings" / "baseline_a").exists():
                shutil.copytree(plan / "recordings" / "baseline_a", plan / "recordings" / phase)
            continue
        subprocess.run(["sh", str(plan / f"{phase}.sh")], env=ONE_THREAD, check=True, timeout=120)


def test_a_recorded_plan_is_judged_at_the_step_where_the_resumed_phase_parts(capsys, tmp_path):
    plan = tmp_path / "plan"
    options = ["--split-step", "4", "--total-step", "8", "--checkpoint", "{run_dir}/ck.pt"]
    template = [sys.executable, str(SCRIPT), "--checkpoint", "{checkpoint}"]
    template += ["--end-step", "{end_step}", "--resume-from", "{resume_from?}"]
    # The schedule fixed (--t-max 8); the momentum forgotten on resume: only tensors differ.
    template += ["--t-max", "8", "--forget-momentum", "--record"]
    assert main(["resume", "--plan-only", str(plan), *options, "--", *template]) == 0
    capsys.readouterr()
    run_phases(plan)
    assert sorted(path.name for path in (plan / "recordings").iterdir()) == sorted(PHASES)

    code = main(["judge", str(plan), "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (1, "FAIL"), report["message"]
    # Right after loading, the momentum buffers are missing: the recorded step 4, not the end.
    assert report["first_divergent_step"] == 4, report["message"]
    assert report["trajectory"]["recorded_steps"]["candidate_resume"] == [4, 5, 6, 7, 8]
    # What the phases recorded is still there after judging: judge can run again.
    assert sorted(path.name for path in (plan / "recordings" / "baseline_a").iterdir())


def test_a_planned_phase_records_its_sample_ids_and_judge_reads_them(capsys, tmp_path):
    # The loader's state not restored: the resumed run trains on the epoch's first samples
    # again. Every sample has the same values and no state is recorded, so only the IDs
    # that record_ids wrote can show it.
    plan = tmp_path / "plan"
    options = ["--split-step", "2", "--total-step", "4", "--checkpoint", "{run_dir}/ck.pt"]
    template = [sys.executable, str(SAMPLE_SCRIPT), "{checkpoint}", "{end_step}"]
    template += ["--loader", "stateful", "--fault-loader-state", "--constant-data"]
    template += ["--no-record", "--resume", "{resume_from?}"]
    assert main(["resume", "--plan-only", str(plan), *options, "--", *template]) == 0
    capsys.readouterr()
    written = json.loads((plan / "plan.json").read_text(encoding="utf-8"))
    for phase in written["phases"]:
        assert phase["environment"]["TRAINPARITY_IDS_DIR"] == str(plan / phase["name"] / "ids")
    run_phases(plan)

    code = main(["judge", str(plan), "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (1, "FAIL"), report["message"]
    assert report["primary_difference"]["path"].startswith("coverage.epoch0"), report["message"]
    assert report["primary_difference"]["reason"] == "sample_repeated"
