"""The processes layer: child groups, a check's training children, the observer, run directories,
signals, progress and the phase plan.
"""
