"""The environment variables that ask a process to trace one step; importing this costs nothing.

`trainparity trace` sets them for the script it runs; record() reads the step
one on its first call, because each record() call then marks a step boundary.
"""

TRACE_STEP_VARIABLE = "TRAINPARITY_TRACE_STEP"
TRACE_OUTPUT_VARIABLE = "TRAINPARITY_TRACE_OUTPUT"
TRACE_KEEP_VARIABLE = "TRAINPARITY_TRACE_KEEP"
TRACE_CAPTURE_VARIABLE = "TRAINPARITY_TRACE_CAPTURE"
