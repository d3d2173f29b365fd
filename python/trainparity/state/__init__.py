"""The state layer: freezing, normalising, paths, snapshots and snapshot files.

`trainparity.state` is also a contract path (CONTRACT §1.4): it re-exports the
frozen-tree names of state/freeze.py and state/paths.py.
"""

from trainparity.state.freeze import SCALAR_TYPES as SCALAR_TYPES
from trainparity.state.freeze import AmbiguousStateNameError as AmbiguousStateNameError
from trainparity.state.freeze import FrozenMapping as FrozenMapping
from trainparity.state.freeze import FrozenSequence as FrozenSequence
from trainparity.state.freeze import FrozenTensor as FrozenTensor
from trainparity.state.freeze import FrozenValue as FrozenValue
from trainparity.state.freeze import FullValueBackend as FullValueBackend
from trainparity.state.freeze import UnsupportedStateError as UnsupportedStateError
from trainparity.state.freeze import contiguous_cpu as contiguous_cpu
from trainparity.state.freeze import freeze as freeze
from trainparity.state.freeze import nested_named_values as nested_named_values
from trainparity.state.paths import render_path as render_path
