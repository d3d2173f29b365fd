"""The comparison layer: policies and the traversal, tensor values, states in memory, snapshot files.

`trainparity.comparison` is also a contract path: it re-exports the policies
and difference records of comparison/policies.py.
"""

from trainparity.comparison.policies import MISSING as MISSING
from trainparity.comparison.policies import ComparisonPolicy as ComparisonPolicy
from trainparity.comparison.policies import ComparisonResult as ComparisonResult
from trainparity.comparison.policies import Difference as Difference
from trainparity.comparison.policies import ExactComparison as ExactComparison
from trainparity.comparison.policies import TensorRecord as TensorRecord
from trainparity.comparison.policies import ToleranceComparison as ToleranceComparison
from trainparity.comparison.policies import collect_differences as collect_differences
from trainparity.comparison.policies import policy_report_fields as policy_report_fields
from trainparity.comparison.policies import summarize as summarize
