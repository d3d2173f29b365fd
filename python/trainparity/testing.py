"""`trainparity.testing`, a public path: its names live in trainparity._internal.testing."""

from trainparity._internal.testing import assert_parity as assert_parity
