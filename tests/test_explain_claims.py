"""explain and the hints claim only what their evidence shows (issue 50, findings 2, 5 and 6).

The fingerprints below are real ones (environment_fingerprint() of this
process) with the one fact a test is about changed, as a recording made by
another process would hold it. The multi-process tests run the realistic
script of tests/fixtures/user_transformer_threads.py, which sets its own
thread count in code.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import trainparity
from trainparity import Outcome
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.why.environment_leads import nondeterminism_hints, ran_on_gpu
from trainparity._internal.why.knob_check import OVERRIDDEN, TOOK, UNSEEN, knob_took
from trainparity._internal.why.lead_trials import NO_EFFECT_SEEN, NOT_CONTROLLABLE, judged

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.user_transformer_threads"


def _fingerprint(threads: int, *, cuda: bool = False, hash_seed: str | None = None) -> dict:
    """This process's fingerprint as a CPU run on `threads` threads would record it."""
    fingerprint = copy.deepcopy(environment_fingerprint())
    fingerprint["threads"]["torch_intra_op"] = threads
    fingerprint["cuda"].update(available=cuda, devices=[])
    if cuda:  # CUDA initialised in the training process: its devices read from torch
        fingerprint["cuda"]["devices"] = [{"name": "GPU", "capability": "9.0"}]
    fingerprint["variables"]["OMP_NUM_THREADS"] = str(threads)
    fingerprint["variables"]["PYTHONHASHSEED"] = hash_seed
    return fingerprint


PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def test_a_thread_pin_the_script_overrides_in_code_is_overridden_not_taken():
    # pin-threads-b called torch.set_num_threads(2) after the rerun set OMP_NUM_THREADS=1.
    both = [("pin-threads-a", _fingerprint(1)), ("pin-threads-b", _fingerprint(2))]
    verdict, evidence = knob_took(PINNED, both)
    assert verdict == OVERRIDDEN
    assert "pin-threads-b recorded threads.torch_intra_op=2" in evidence
    status, said = judged("ruled out", "still part at step 1", (verdict, evidence))
    assert status == NOT_CONTROLLABLE and "the script sets it in code" in said


def test_ruled_out_needs_every_fingerprint_to_show_the_pinned_value():
    both = [("pin-threads-a", _fingerprint(1)), ("pin-threads-b", _fingerprint(1))]
    took = knob_took(PINNED, both)
    assert took[0] == TOOK
    assert judged("ruled out", "still part at step 1", took)[0] == "ruled out"
    # A variable no fingerprint keeps cannot be shown to have taken: no effect seen, unverified.
    unseen = knob_took({"UNREAD_SETTING": "on"}, both)
    assert unseen[0] == UNSEEN
    assert judged("ruled out", "still part at step 1", unseen)[0] == NO_EFFECT_SEEN
    # A rerun that reproduces the other side bit for bit stays confirmed.
    assert judged("confirmed", "equal", unseen)[0] == "confirmed"


def test_hints_on_a_cpu_run_name_the_thread_counts_and_no_gpu_knob():
    environment = {"OMP_NUM_THREADS": "1"}  # what the check set; the script set its own
    recorded = [("baseline_a", _fingerprint(1)), ("baseline_b", _fingerprint(2))]
    hints = nondeterminism_hints(environment, recorded, device=None)
    text = " ".join(hints)
    assert "baseline_a: 1, baseline_b: 2" in text and "threads.torch_intra_op" in text
    assert "NoiseComparison()" in text
    assert "CUBLAS_WORKSPACE_CONFIG" not in text
    assert "PYTHONHASHSEED" not in text  # nothing points there
    assert not ran_on_gpu(recorded, None) and not ran_on_gpu(recorded, "cuda")


def test_gpu_and_hash_seed_hints_only_where_the_fingerprints_point_there():
    on_gpu = [
        ("baseline_a", _fingerprint(1, cuda=True)),
        ("baseline_b", _fingerprint(1, cuda=True)),
    ]
    assert any("CUBLAS_WORKSPACE_CONFIG" in hint for hint in nondeterminism_hints({}, on_gpu))
    assert not any("CUBLAS" in hint for hint in nondeterminism_hints({}, on_gpu, device="cpu"))
    seeds = [("a", _fingerprint(1, hash_seed="0")), ("b", _fingerprint(1, hash_seed="1"))]
    assert any("PYTHONHASHSEED (a: 0, b: 1)" in hint for hint in nondeterminism_hints({}, seeds))
    same = [("a", _fingerprint(1)), ("b", _fingerprint(1))]
    (agree,) = nondeterminism_hints({}, same)
    assert "fingerprints agree" in agree and "PYTHONHASHSEED" not in agree
    (unrecorded,) = nondeterminism_hints({}, [])
    assert "recorded no fingerprint" in unrecorded and "record()" in unrecorded


def test_explain_does_not_rule_out_threads_the_script_sets_in_code(tmp_path):
    """The realistic script picks its thread count in code; the baselines take 1 and 2."""
    # The check's children take the very pin explain's threads rerun sets (PINNED): its reruns
    # fork from the check's own warm server, and the pin is still overridden in code.
    environment = {"USER_THREADS": "per_run", **PINNED}
    result = trainparity.check_resume(
        f"{CASES}:UserTransformerCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        environment=environment,
    )
    assert result.outcome is Outcome.ABSTAIN, result.message
    hints = " ".join(result.nondeterminism_hints)
    assert "baseline_a: 1, baseline_b: 2" in hints
    assert "CUBLAS" not in hints and "PYTHONHASHSEED" not in hints
    explanation = trainparity.explain(
        result, cwd=REPO_ROOT, environment=environment, temporary_root=tmp_path, max_reruns=1
    )
    statuses = {lead.knob: lead.status for lead in explanation.leads}
    # The pin OMP_NUM_THREADS=1 did not hold in the process that set 2 threads in code.
    assert statuses == {"threads": NOT_CONTROLLABLE}, explanation.leads
    (threads,) = explanation.leads
    assert "pin-threads-b recorded threads.torch_intra_op=2" in threads.evidence
    assert "CUBLAS_WORKSPACE_CONFIG" not in str(explanation.to_dict())
    assert "threads is set by the script itself" in explanation.message
    assert explanation.outcome is Outcome.ABSTAIN


def _traced_resume_step(resumed: bool, *, restored: bool = False):
    """One traced step of a model with dropout, as a baseline or as a resume that did not
    restore torch's generator. The baseline's sampler ends its epoch in this step: its last
    draw (a randperm whose output nobody uses) comes before the next epoch's order; the resumed
    process starts at the new epoch and draws its order once. Both orders are equal."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    batch = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    old_epoch, new_epoch = torch.Generator().manual_seed(10), torch.Generator().manual_seed(11)

    def step() -> None:
        if not resumed:
            torch.randperm(8, generator=old_epoch)  # the ending epoch's sampler, exhausted
        order = torch.randperm(8, generator=new_epoch)
        model(batch[order[:4] % 4]).sum().backward()

    torch.manual_seed(3 if resumed and not restored else 0)  # the generator not restored
    return trainparity.trace(None, model=model, inputs={"batch": batch}, run=step, step=1)


def test_the_first_op_named_is_the_dropout_not_an_extra_draw_paired_with_another():
    """Finding 6: ops are paired by call index; a group called more often on one side pairs
    unrelated calls, so its difference is passed over for the first op that really parts."""
    from trainparity._internal.why.forensics import diff_traces

    diff = diff_traces(_traced_resume_step(False), _traced_resume_step(True))
    first = diff.first_divergence
    assert first["op"].startswith("aten::bernoulli") or "dropout" in first["op"], diff.message
    assert first["module"] == "1" and first["origin"] == "born"
    assert "randperm" not in first["op"]
    assert "were passed over" in diff.message


def test_the_realistic_resume_trace_names_the_dropout_not_the_collate_of_skipped_batches(
    tmp_path,
):
    """The user's script traced at the first step after a resume that did not restore torch's
    generator: the resumed process collates the batch it skips by iterating (more aten::stack
    calls) and draws its epoch order; the first op named is the dropout whose mask differs.

    The traces are explain's own, of a check of that resume: the generator differs right after
    loading (step 3), so explain reruns the uninterrupted run and the resume (after its split)
    to step 4 and traces that step in both, as the user's command would. Its processes fork
    from one warm server, where three fresh interpreters would each import torch."""
    result = trainparity.check_resume(
        f"{CASES}:UserTransformerRngCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        environment=PINNED,
        explain=True,
    )
    assert result.outcome is Outcome.FAIL, result.message
    explanation = result.explanation
    assert result.first_divergent_step == 3, result.message
    assert explanation["step"] == 4, explanation["message"]
    assert tuple(explanation["sides"]) == ("baseline_a", "candidate_resume")
    first, said = explanation["first_op"], explanation["trace_message"]
    assert first["op"].startswith("aten::bernoulli"), said
    assert first["module"].startswith("encoder") and first["origin"] == "born"
    assert "were passed over" in said


def test_when_only_unpaired_calls_differ_the_op_is_named_as_what_it_is():
    """The generator restored: the dropout agrees, and only the extra draw's group differs. It
    is named with its call counts, "not necessarily where the runs part", and explain's
    sentence neither calls it the place they part nor blames a generator for it."""
    from trainparity._internal.why.explain import _op_fields
    from trainparity._internal.why.explanation import explanation_sentence
    from trainparity._internal.why.forensics import diff_traces

    diff = diff_traces(_traced_resume_step(False), _traced_resume_step(True, restored=True))
    first = diff.first_divergence
    assert first["op"].startswith("aten::randperm") and first["call_counts"] == [2, 1]
    assert "not necessarily where the runs part" in diff.message
    sentence = explanation_sentence([], [], _op_fields(first), False, False, (1, 1.0), False)
    assert "called 2 times in one step and 1 in the other" in sentence
    assert "the first op where they part" not in sentence
