"""The runs wing: check_runs, its plan of variants, the execution behind it, and its result."""
