"""`trainparity.distributed.record_ids`: per-rank sample ID records, a documented path kept as a face; see docs/api.md."""

from trainparity.recording.record_ids import FLUSH_IDS as FLUSH_IDS
from trainparity.recording.record_ids import IDS_DIR_VARIABLE as IDS_DIR_VARIABLE
from trainparity.recording.record_ids import ConsumptionSteps as ConsumptionSteps
from trainparity.recording.record_ids import batch_ends as batch_ends
from trainparity.recording.record_ids import consumption_steps as consumption_steps
from trainparity.recording.record_ids import flush_ids as flush_ids
from trainparity.recording.record_ids import mark_step as mark_step
from trainparity.recording.record_ids import read_recorded_ids as read_recorded_ids
from trainparity.recording.record_ids import record_ids as record_ids
from trainparity.recording.record_ids import recorded_epochs as recorded_epochs
from trainparity.recording.record_ids import recorded_ids as recorded_ids
