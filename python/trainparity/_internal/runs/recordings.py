"""check_runs' use of recordings: every run records into its own directory; runs are compared record by record.

Two runs of check_runs train the same schedule, so their records align one
by one (a claimed step that differs is itself a difference, at path `step`).
Ranks are compared rank by rank where both runs have them; a variant with
fewer ranks (2 ranks against 1) is compared on the ranks it has, since every
rank of a data-parallel job holds the same replicated state. When two ranks
or more are compared, difference paths name their rank (`rank1.model.weight`).
Runs on different rank counts whose records hold sharded tensors (FSDP2's
DTensors) have no replicated rank to pair: they are compared on the global
state instead (recording/elastic.py), and `trajectory.compared_on` says so.
"""

from __future__ import annotations

from itertools import zip_longest

from trainparity._internal.recording.elastic import global_pairs, joined_steps
from trainparity._internal.recording.phase_recordings import PhaseRecordings, TrajectoryError
from trainparity._internal.recording.reader import Recording
from trainparity._internal.recording.trajectory import StepDivergence, first_divergence, rank_named
from trainparity._internal.state.reassembly import holds_shards

__all__ = ["RunsTrajectories"]


class RunsTrajectories(PhaseRecordings):
    """The recordings of one check_runs, read when the decision sequence needs them."""

    def part(self, baseline_run: str, candidate_run: str) -> StepDivergence | None:
        """The first record at which two runs differ; None when equal or when neither recorded."""
        baseline, candidate = self.read(baseline_run), self.read(candidate_run)
        if not baseline and not candidate:
            return None
        for silent, other in ((baseline_run, candidate_run), (candidate_run, baseline_run)):
            if not self.recordings[silent]:
                raise TrajectoryError(
                    f"{silent} recorded no step but {other} did: record() must run in every run"
                )
        if set(baseline) != set(candidate) and (_sharded(baseline) or _sharded(candidate)):
            return self._global_part(baseline_run, candidate_run)
        ranks = sorted(set(baseline) & set(candidate))
        if not ranks:
            raise TrajectoryError(
                f"{baseline_run} recorded ranks {sorted(baseline)} and {candidate_run} "
                f"ranks {sorted(candidate)}: no rank to compare"
            )
        found = [
            first_divergence(
                self.policy,
                self.aligned(
                    baseline_run,
                    candidate_run,
                    rank,
                    (
                        (a, b, False)
                        for a, b in zip_longest(baseline[rank].steps, candidate[rank].steps)
                    ),
                ),
                rank=rank,
                baseline_phase=baseline_run,
                candidate_phase=candidate_run,
            )
            for rank in ranks
        ]
        present = [divergence for divergence in rank_named(found, len(ranks)) if divergence]
        divergence = min(present, key=lambda d: (d.step, d.rank)) if present else None
        return self._reported(divergence)

    def _global_part(self, baseline_run: str, candidate_run: str) -> StepDivergence | None:
        used: set[str] = set()
        pairs = zip_longest(
            joined_steps(self.recordings[baseline_run], baseline_run),
            joined_steps(self.recordings[candidate_run], candidate_run),
        )
        divergence = first_divergence(
            self.policy,
            global_pairs(((a, b, False) for a, b in pairs), used),
            rank=0,
            baseline_phase=baseline_run,
            candidate_phase=candidate_run,
        )
        if used:  # else no record was compared
            self.compared_on[candidate_run] = " and ".join(sorted(used))
        return self._reported(divergence)

    def _reported(self, divergence: StepDivergence | None) -> StepDivergence | None:
        if divergence is not None and self.divergence is None:
            self.divergence = divergence  # the one the verdict reports
        return divergence


def _sharded(recordings: dict[int, Recording]) -> bool:
    """Whether a run's first record holds a shard of a sharded tensor (on its lowest rank)."""
    steps = recordings[min(recordings)].steps
    return bool(steps) and holds_shards(steps[0].state)
