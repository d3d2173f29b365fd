"""The comparison layer: policies and the traversal, tensor values, states in memory, snapshot files."""
