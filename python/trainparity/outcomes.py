"""`trainparity.outcomes`, a public path: its names live in trainparity._internal.outcomes."""

from trainparity._internal.outcomes import Outcome as Outcome
