"""Readers for checkpoint formats that observe_checkpoint receives (DCP directories)."""

from trainparity.checkpoints.dcp import load_dcp

__all__ = ["load_dcp"]
