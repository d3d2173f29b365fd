"""`python -m trainparity._internal.processes.observer`: the observer worker (snapshot_service.py)."""

from trainparity._internal.processes.observer.snapshot_service import main
from trainparity._internal.processes.worker_exit import exit_worker

exit_worker(main())
