"""`trainparity.snapshot_file`: snapshot files, a documented path kept as a face; see docs/api.md."""

from trainparity.state.snapshot_file import SNAPSHOT_FILE_FORMAT as SNAPSHOT_FILE_FORMAT
from trainparity.state.snapshot_file import (
    SNAPSHOT_REFERENCES_FORMAT as SNAPSHOT_REFERENCES_FORMAT,
)
from trainparity.state.snapshot_file import SnapshotFileInfo as SnapshotFileInfo
from trainparity.state.snapshot_file import read_snapshot as read_snapshot
from trainparity.state.snapshot_file import write_snapshot as write_snapshot
from trainparity.state.tree_codec import SnapshotFileError as SnapshotFileError
from trainparity.state.tree_codec import decode_tree as decode_tree
from trainparity.state.tree_codec import encode_tree as encode_tree
