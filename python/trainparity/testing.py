"""`trainparity.testing`, a public path (docs/api.md, "Module paths"): re-exports from trainparity._internal.testing."""

from trainparity._internal.testing import assert_parity as assert_parity
