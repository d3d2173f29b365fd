"""The observer: a worker process that turns a check's checkpoints into snapshot files.

`snapshot_service` runs in the worker process (`python -m
trainparity._internal.processes.observer`); `client` is the checking
process's side of it. This package imports neither, so the worker never
loads its client.
"""
