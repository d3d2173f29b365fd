"""`trainparity.integrations.accelerate`, a public path (docs/integrations.md): re-exports."""

from trainparity._internal.integrations.accelerate import AccelerateCase as AccelerateCase
from trainparity._internal.integrations.accelerate import NeedsUnpickling as NeedsUnpickling
from trainparity._internal.integrations.accelerate import PhaseRun as PhaseRun
from trainparity._internal.integrations.accelerate import (
    observe_accelerate_checkpoint as observe_accelerate_checkpoint,
)
