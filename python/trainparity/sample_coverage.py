"""`trainparity.sample_coverage`: the sample coverage audit, a contract path (docs/api.md, "Module paths")."""

from trainparity._internal.coverage.arrays import RankArray as RankArray
from trainparity._internal.coverage.audit import AtLeastOnce as AtLeastOnce
from trainparity._internal.coverage.audit import B as B
from trainparity._internal.coverage.audit import CoveragePolicy as CoveragePolicy
from trainparity._internal.coverage.audit import ExactlyOnce as ExactlyOnce
from trainparity._internal.coverage.audit import ExpectedPadding as ExpectedPadding
from trainparity._internal.coverage.audit import NoCrossRankOverlap as NoCrossRankOverlap
from trainparity._internal.coverage.audit import SampleAnomaly as SampleAnomaly
from trainparity._internal.coverage.audit import SampleCoverageAuditor as SampleCoverageAuditor
from trainparity._internal.coverage.audit import SampleCoverageResult as SampleCoverageResult
from trainparity._internal.coverage.audit import SampleObservation as SampleObservation
from trainparity._internal.coverage.audit import SampleViolation as SampleViolation
from trainparity._internal.coverage.audit import audit_rank_arrays as audit_rank_arrays
from trainparity._internal.coverage.audit import audit_rank_iterables as audit_rank_iterables
from trainparity._internal.coverage.audit import audit_sample_coverage as audit_sample_coverage
from trainparity._internal.coverage.global_order import GlobalOrderResult as GlobalOrderResult
from trainparity._internal.coverage.global_order import MovedId as MovedId
from trainparity._internal.coverage.global_order import SameGlobalOrder as SameGlobalOrder
from trainparity._internal.coverage.global_order import audit_global_order as audit_global_order
from trainparity._internal.coverage.recorded_ids import audit_recorded_chain as audit_recorded_chain
from trainparity._internal.coverage.recorded_ids import audit_recorded_ids as audit_recorded_ids
