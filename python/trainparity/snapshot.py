"""`trainparity.snapshot`: the snapshot record and live capture, a contract path (CONTRACT.md) kept as a face; see docs/api.md."""

from trainparity.state.capture import CaptureIssue as CaptureIssue
from trainparity.state.capture import CaptureResult as CaptureResult
from trainparity.state.capture import capture_snapshot as capture_snapshot
from trainparity.state.snapshot import REFERENCE_BACKEND as REFERENCE_BACKEND
from trainparity.state.snapshot import SNAPSHOT_SCHEMA_VERSION as SNAPSHOT_SCHEMA_VERSION
from trainparity.state.snapshot import Snapshot as Snapshot
