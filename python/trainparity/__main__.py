"""`python -m trainparity`: the trainparity command line."""

from trainparity._internal.cli.main import run_as_program

run_as_program()
