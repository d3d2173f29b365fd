"""`python -m trainparity`: the trainparity command line."""

import sys

from trainparity.cli.main import main

sys.exit(main())
