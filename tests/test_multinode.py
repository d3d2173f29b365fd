"""Multi-node torchrun phases on one host: two agents as two nodes, one rank each, one c10d rendezvous.

docs/distributed.md's 2-rank DDP/DCP project, its phases spread over two
"nodes" (`torchrun_command(..., nnodes=2)`): PASS like the one-node job, with
a row per node and per rank; and a node whose rank dies is named in the ERROR,
warm (the launcher forks its agents, they their ranks) and fresh.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from trainparity import check_resume
from trainparity._internal.distributed.rank_processes import read_rank_exits
from trainparity._internal.distributed.torchrun_argv import torchrun_command

REPO = Path(__file__).resolve().parent.parent
CASES = """
from pathlib import Path

from parity_case import DistributedResumeCase
from trainparity._internal.distributed.torchrun_argv import torchrun_command


class TwoNodes(DistributedResumeCase):
    script = "train.py"

    def command(self, plan):
        script = [str(plan.cwd / self.script), "--checkpoint", str(self.checkpoint_path(plan.run_dir)),
                  "--end-step", str(plan.end_step)]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from)]
        return torchrun_command(script, nproc_per_node=1, nnodes=2, log_dir=plan.run_dir / "ranks")


class NodeOneDies(TwoNodes):
    script = "die_on_node_one.py"
"""
DIES = """
import os, runpy, sys
if os.environ["TRAINPARITY_NODE"] == "1":
    sys.exit("node one is going down")
sys.argv[0] = os.path.join(os.path.dirname(__file__), "train.py")
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("multinode") / "project"
    shutil.copytree(
        REPO / "docs" / "examples" / "distributed_project",
        root,
        ignore=shutil.ignore_patterns(".trainparity-runs", "trainparity-report*", "__pycache__"),
    )
    (root / "multinode_cases.py").write_text(CASES, encoding="utf-8")
    (root / "die_on_node_one.py").write_text(DIES, encoding="utf-8")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for module in ("multinode_cases", "parity_case"):
        sys.modules.pop(module, None)


def _check(project, case, **options):
    return check_resume(
        f"multinode_cases:{case}",
        cwd=project,
        work_dir=project / "runs" / case,
        environment={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},
        **options,
    )


def test_the_node_launcher_command_spans_the_nodes():
    argv = torchrun_command(["train.py"], nproc_per_node=1, nnodes=2)
    assert argv[1:5] == ["-m", "trainparity._internal.distributed.nodes", "--nnodes", "2"]
    assert "--nnodes=2" in argv and not any(item.startswith("--rdzv-endpoint") for item in argv)
    with pytest.raises(ValueError, match="nnodes"):
        torchrun_command(["train.py"], nproc_per_node=1, nnodes=0)


def test_two_nodes_pass_with_a_row_per_node_and_per_rank(project):
    result = _check(project, "TwoNodes")
    assert result.outcome == "PASS", result.message
    for process in result.processes:
        assert [node.node for node in process.nodes] == [0, 1], process
        assert [node.returncode for node in process.nodes] == [0, 0]
        assert [rank.rank for rank in process.ranks] == [0, 1], process
    report = result.to_dict()
    assert {"node", "pid", "returncode"} <= set(report["processes"][0]["nodes"][0])
    # Warm, as the suite runs checks: the launcher forked each node's agent from a zygote, and
    # each agent its rank from one of its own, which measured the rank's exit (a fresh agent's
    # exec'd ranks are only sampled, and write no such file).
    for phase in ("baseline_a", "baseline_b", "candidate_split", "candidate_resume"):
        exits = read_rank_exits(project / "runs" / "TwoNodes" / phase / "rank_exits.jsonl")
        assert sorted(exit.row.rank for exit in exits.values()) == [0, 1], phase


@pytest.mark.parametrize("start", ["warm", "fresh"])
def test_a_node_that_dies_is_named_in_the_error(project, start):
    result = _check(project, "NodeOneDies", parallel=False, start=start)
    assert result.outcome == "ERROR"
    first_line = result.message.splitlines()[0]
    assert first_line.startswith(
        "baseline_a child exited with status 1: node 1 (torchrun agent pid "
    )
    assert "rank 1 exited with code 1; its last stderr line: node one is going down" in first_line
