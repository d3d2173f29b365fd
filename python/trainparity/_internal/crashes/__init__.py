"""The crash check's wing: kill a job at every step and inside every save, restart it, compare."""
