"""`trainparity.sample_coverage`: the sample coverage audit, a contract path (CONTRACT.md) kept as a face; see docs/api.md."""

from trainparity.coverage.arrays import RankArray as RankArray
from trainparity.coverage.audit import AtLeastOnce as AtLeastOnce
from trainparity.coverage.audit import B as B
from trainparity.coverage.audit import CoveragePolicy as CoveragePolicy
from trainparity.coverage.audit import ExactlyOnce as ExactlyOnce
from trainparity.coverage.audit import ExpectedPadding as ExpectedPadding
from trainparity.coverage.audit import NoCrossRankOverlap as NoCrossRankOverlap
from trainparity.coverage.audit import SampleAnomaly as SampleAnomaly
from trainparity.coverage.audit import SampleCoverageAuditor as SampleCoverageAuditor
from trainparity.coverage.audit import SampleCoverageResult as SampleCoverageResult
from trainparity.coverage.audit import SampleObservation as SampleObservation
from trainparity.coverage.audit import SampleViolation as SampleViolation
from trainparity.coverage.audit import audit_rank_arrays as audit_rank_arrays
from trainparity.coverage.audit import audit_rank_iterables as audit_rank_iterables
from trainparity.coverage.audit import audit_sample_coverage as audit_sample_coverage
from trainparity.coverage.global_order import GlobalOrderResult as GlobalOrderResult
from trainparity.coverage.global_order import MovedId as MovedId
from trainparity.coverage.global_order import SameGlobalOrder as SameGlobalOrder
from trainparity.coverage.global_order import audit_global_order as audit_global_order
