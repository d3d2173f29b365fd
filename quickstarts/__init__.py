"""Runnable quickstarts: `python -m trainparity.quickstarts.<name>`."""
