"""`python -m trainparity`: the trainparity command line."""

import sys

from trainparity.cli import main

sys.exit(main())
