"""`python -m trainparity._internal.processes.observer`: the observer worker (snapshot_service.py)."""

import sys

from trainparity._internal.processes.observer.snapshot_service import main

sys.exit(main())
