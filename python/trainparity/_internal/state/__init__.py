"""The state layer: freezing, normalising, paths, snapshots and snapshot files."""
