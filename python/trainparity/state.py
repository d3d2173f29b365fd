"""`trainparity.state`, a contract path: the frozen-tree names (freeze, paths)."""

from trainparity._internal.state.freeze import SCALAR_TYPES as SCALAR_TYPES
from trainparity._internal.state.freeze import AmbiguousStateNameError as AmbiguousStateNameError
from trainparity._internal.state.freeze import FrozenMapping as FrozenMapping
from trainparity._internal.state.freeze import FrozenSequence as FrozenSequence
from trainparity._internal.state.freeze import FrozenTensor as FrozenTensor
from trainparity._internal.state.freeze import FrozenValue as FrozenValue
from trainparity._internal.state.freeze import FullValueBackend as FullValueBackend
from trainparity._internal.state.freeze import UnsupportedStateError as UnsupportedStateError
from trainparity._internal.state.freeze import contiguous_cpu as contiguous_cpu
from trainparity._internal.state.freeze import freeze as freeze
from trainparity._internal.state.freeze import nested_named_values as nested_named_values
from trainparity._internal.state.paths import render_path as render_path
