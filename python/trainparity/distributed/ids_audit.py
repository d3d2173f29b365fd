"""`trainparity.distributed.ids_audit`: audit_recorded_ids and audit_recorded_chain, a documented path kept as a face; see docs/api.md."""

from trainparity.coverage.recorded_ids import audit_recorded_chain as audit_recorded_chain
from trainparity.coverage.recorded_ids import audit_recorded_ids as audit_recorded_ids
