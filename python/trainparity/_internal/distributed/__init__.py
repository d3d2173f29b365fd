"""Multi-rank jobs: torchrun command lines, rank-aware phase evidence, and what a rank's script calls (end_rank; track_ids and flush_ids live in recording/)."""
