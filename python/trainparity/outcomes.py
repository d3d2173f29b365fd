"""`trainparity.outcomes`, a public path (docs/api.md, "Module paths"): re-exports from trainparity._internal.outcomes."""

from trainparity._internal.outcomes import Outcome as Outcome
