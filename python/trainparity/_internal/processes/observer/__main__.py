"""`python -m trainparity._internal.processes.observer`: run the observer worker (worker.py)."""

import sys

from trainparity._internal.processes.observer.worker import main

sys.exit(main())
