"""`trainparity.snapshot_diff`: the diff of two snapshot files, a documented path kept as a face; see docs/api.md."""

from trainparity.comparison.snapshots import SnapshotDiff as SnapshotDiff
from trainparity.comparison.snapshots import diff_snapshots as diff_snapshots
