"""`trainparity.integrations.deepspeed`: its names live in trainparity._internal.integrations.deepspeed."""

from trainparity._internal.integrations.deepspeed import engine_state as engine_state
