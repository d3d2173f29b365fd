"""`trainparity.snapshot`: the snapshot record and live capture, a contract path (docs/api.md, "Module paths")."""

from trainparity._internal.state.snapshot import REFERENCE_BACKEND as REFERENCE_BACKEND
from trainparity._internal.state.snapshot import SNAPSHOT_SCHEMA_VERSION as SNAPSHOT_SCHEMA_VERSION
from trainparity._internal.state.snapshot import Snapshot as Snapshot
from trainparity._internal.state.snapshot_capture import CaptureIssue as CaptureIssue
from trainparity._internal.state.snapshot_capture import CaptureResult as CaptureResult
from trainparity._internal.state.snapshot_capture import capture_snapshot as capture_snapshot
from trainparity._internal.state.snapshot_file import SNAPSHOT_FILE_FORMAT as SNAPSHOT_FILE_FORMAT
from trainparity._internal.state.snapshot_file import (
    SNAPSHOT_REFERENCES_FORMAT as SNAPSHOT_REFERENCES_FORMAT,
)
from trainparity._internal.state.snapshot_file import SnapshotFileInfo as SnapshotFileInfo
from trainparity._internal.state.snapshot_file import read_snapshot as read_snapshot
from trainparity._internal.state.snapshot_file import write_snapshot as write_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError as SnapshotFileError
from trainparity._internal.state.tree_codec import decode_tree as decode_tree
from trainparity._internal.state.tree_codec import encode_tree as encode_tree
