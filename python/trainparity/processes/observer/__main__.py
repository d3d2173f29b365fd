"""`python -m trainparity.processes.observer`: run the observer worker (worker.py)."""

import sys

from trainparity.processes.observer.worker import main

sys.exit(main())
