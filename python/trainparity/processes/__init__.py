"""The processes layer: child groups, a check's training children, the observer, run directories,
signals, progress and the phase plan.

`trainparity.processes` is also a documented path: it re-exports the child
group of processes/group.py.
"""

from trainparity.processes.group import DEFAULT_GRACE_SECONDS as DEFAULT_GRACE_SECONDS
from trainparity.processes.group import ChildGroup as ChildGroup
from trainparity.processes.group import ChildLaunchError as ChildLaunchError
from trainparity.processes.group import ChildResult as ChildResult
from trainparity.processes.group import ChildSpec as ChildSpec
from trainparity.processes.group import EventCallback as EventCallback
from trainparity.processes.group import EventKind as EventKind
from trainparity.processes.group import run_children as run_children
