"""`trainparity.comparison`, a contract path: the comparison policies and difference records."""

from trainparity._internal.comparison.policies import MISSING as MISSING
from trainparity._internal.comparison.policies import ComparisonPolicy as ComparisonPolicy
from trainparity._internal.comparison.policies import ComparisonResult as ComparisonResult
from trainparity._internal.comparison.policies import Difference as Difference
from trainparity._internal.comparison.policies import ExactComparison as ExactComparison
from trainparity._internal.comparison.policies import TensorRecord as TensorRecord
from trainparity._internal.comparison.policies import ToleranceComparison as ToleranceComparison
from trainparity._internal.comparison.policies import collect_differences as collect_differences
from trainparity._internal.comparison.policies import policy_report_fields as policy_report_fields
from trainparity._internal.comparison.policies import summarize as summarize
