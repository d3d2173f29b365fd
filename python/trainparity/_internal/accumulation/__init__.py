"""The accumulation wing: check_accumulation, its plan, execution, ranks, verdict, worker and result."""
