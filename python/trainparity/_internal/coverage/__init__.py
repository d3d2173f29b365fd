"""The coverage wing: the sample coverage audit, its ID keys, rank arrays, evidence file and analysis."""
