"""Readers for checkpoint formats that observe_checkpoint receives (DCP and DeepSpeed ZeRO"""
