"""The environment variables that ask a process to record its steps; importing this costs nothing.

record() reads them on its first call, and check_resume and check_runs set
them for their children; they live here so that neither side has to import
the other for a name. The step-trace variables are why/forensics/variables.py's.
"""

RECORD_VARIABLE = "TRAINPARITY_RECORD"
MODE_VARIABLE = "TRAINPARITY_RECORD_MODE"
EVERY_VARIABLE = "TRAINPARITY_RECORD_EVERY"
FULL_BELOW_VARIABLE = "TRAINPARITY_RECORD_FULL_BELOW"
PHASE_VARIABLE = "TRAINPARITY_RECORD_PHASE"
ALSO_VARIABLE = "TRAINPARITY_RECORD_ALSO"
