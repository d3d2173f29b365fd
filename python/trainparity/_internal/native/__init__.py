"""The native layer: the C core's Python face, the CUDA backend, and the dtypes both handle."""
