"""`trainparity.integrations.deepspeed`, a public path (docs/integrations.md): re-exports."""

from trainparity._internal.integrations.deepspeed import engine_state as engine_state
