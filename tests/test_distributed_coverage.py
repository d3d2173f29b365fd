"""record_ids in a real 2-rank torchrun job, audited per epoch; crash safety of the records."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from trainparity import AtLeastOnce, ExactlyOnce, ExpectedPadding, NoCrossRankOverlap, record_ids
from trainparity._internal.coverage.audit import audit_rank_arrays
from trainparity._internal.coverage.recorded_ids import audit_recorded_ids
from trainparity._internal.recording.record_ids import (
    read_recorded_ids,
    recorded_epochs,
    recorded_ids,
)

from tests.cli_here import CLI, completed_here
from tests.helpers import run_torchrun_job

JOB = Path(__file__).resolve().parent / "fixtures" / "distributed" / "coverage_job.py"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """One real torchrun job (2 ranks, gloo) recording three pipelines; its output directory."""
    out = tmp_path_factory.mktemp("coverage")
    run_torchrun_job(JOB, [str(out)], ranks=2, out=out, logs=out / "logs")
    return out


def test_padded_sampler_passes_expected_padding_in_every_epoch_and_fails_exactly_once(recorded):
    directory = recorded / "padded"
    assert {epoch: sorted(ranks) for epoch, ranks in recorded_epochs(directory).items()} == {
        0: [0, 1],
        1: [0, 1],
    }
    padded = audit_recorded_ids(directory, policy=ExpectedPadding(range(13), 1))
    assert [result.outcome for result in padded.values()] == ["PASS", "PASS"]
    strict = audit_rank_arrays(recorded_ids(directory, 1), policy=ExactlyOnce(range(13)), epoch=1)
    violation = strict.first_violation
    assert violation.path == "coverage.cross_rank_overlap" and violation.rank == 1
    assert violation.epoch == 1
    # The padded duplicate is the first ID of rank 0's share, repeated at rank 1's end.
    rank0 = read_recorded_ids(directory / "rank0.epoch1.ids").cast("q").tolist()
    rank1 = read_recorded_ids(directory / "rank1.epoch1.ids").cast("q").tolist()
    assert strict.anomaly_examples[0].sample_id == rank1[-1] == rank0[0]
    assert violation.position == len(rank1) - 1


def test_unsplit_iterable_dataset_fails_no_cross_rank_overlap_at_the_first_shared_id(recorded):
    results = audit_recorded_ids(recorded / "unsplit", policy=NoCrossRankOverlap())
    violation = results[0].first_violation
    assert results[0].outcome == "FAIL"
    assert violation.path == "coverage.cross_rank_overlap"
    assert (violation.rank, violation.position) == (1, 0)  # rank 1's first ID, 0, is rank 0's too
    assert results[0].anomaly_examples[0].sample_id == 0


def test_drop_last_fails_at_least_once_at_the_dropped_sample(recorded):
    result = audit_recorded_ids(recorded / "dropped", policy=AtLeastOnce(range(13)))[0]
    assert result.outcome == "FAIL" and result.first_violation.path == "coverage.missing_ids"
    seen = set(recorded_ids(recorded / "dropped", 0)[0].cast("q").tolist())
    seen |= set(recorded_ids(recorded / "dropped", 0)[1].cast("q").tolist())
    assert [example.sample_id for example in result.anomaly_examples] == sorted(
        set(range(13)) - seen
    )


def test_cli_audits_every_epoch_of_an_ids_dir(recorded):
    def cli(*arguments):
        return completed_here([*CLI, "coverage", "--json", *arguments])  # tests/cli_here.py

    directory = str(recorded / "padded")
    passed = cli(
        "--ids-dir",
        directory,
        "--policy",
        "expected_padding",
        "--universe",
        "13",
        "--padding-count",
        "1",
    )
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["epochs"] == {"0": "PASS", "1": "PASS"}
    failed = cli(
        "--ids-dir", directory, "--policy", "exactly_once", "--universe", "13", "--epoch", "1"
    )
    report = json.loads(failed.stdout)
    assert failed.returncode == 1 and report["epochs"] == {"1": "FAIL"}
    assert report["first_violation"]["epoch"] == 1


_KILLED_WRITER = """
import os, signal, sys
from trainparity import record_ids
from trainparity._internal.recording.record_ids import flush_ids
for batch in range(100):
    record_ids(range(batch * 10, batch * 10 + 10), epoch=3, directory=sys.argv[1], rank=2)
flush_ids()
record_ids([123456], epoch=3, directory=sys.argv[1], rank=2)  # buffered, never flushed
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_leaves_every_flushed_id_and_a_torn_tail_is_ignored(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], capture_output=True, timeout=120
    )
    assert completed.returncode == -signal.SIGKILL
    path = tmp_path / "rank2.epoch3.ids"
    assert read_recorded_ids(path).cast("q").tolist() == list(range(1000))
    with open(path, "ab") as handle:
        handle.write(b"\x01\x02\x03")  # a write cut short inside one value
    assert read_recorded_ids(path).cast("q").tolist() == list(range(1000))
    result = audit_recorded_ids(tmp_path, policy=ExactlyOnce(range(1000)))
    assert result[3].outcome == "PASS"


def test_rank_comes_from_the_environment_without_a_process_group(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("TRAINPARITY_IDS_DIR", str(tmp_path))
    record_ids([7, 8], epoch=0)
    record_ids([9], epoch=1)  # the epoch changes: epoch 0's file is complete now
    assert read_recorded_ids(tmp_path / "rank5.epoch0.ids").cast("q").tolist() == [7, 8]
    monkeypatch.delenv("TRAINPARITY_IDS_DIR")
    record_ids([1], epoch=0)  # no directory: records nothing
    with pytest.raises(ValueError, match="epoch"):
        record_ids([1], epoch=-1, directory=tmp_path)
