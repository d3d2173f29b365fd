"""Case classes and training scripts of the framework and distributed programs (see common.py)."""
