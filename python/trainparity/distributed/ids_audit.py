"""`trainparity.distributed.ids_audit`: audit_recorded_ids, a documented path kept as a face; see docs/api.md."""

from trainparity.coverage.recorded_ids import audit_recorded_ids as audit_recorded_ids
