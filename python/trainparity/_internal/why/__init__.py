"""Why two runs part: rerun them, trace the first divergent step, and test each lead by a rerun."""
