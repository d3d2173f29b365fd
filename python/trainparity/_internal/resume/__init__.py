"""The resume wing: check_resume, the execution behind it, and its result."""
