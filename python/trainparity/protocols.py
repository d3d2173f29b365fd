"""`trainparity.protocols`, a public path (docs/api.md, "Module paths"): re-exports from trainparity._internal.protocols."""

from trainparity._internal.protocols import AccumulationCase as AccumulationCase
from trainparity._internal.protocols import LossAccounting as LossAccounting
from trainparity._internal.protocols import ProcessExecutionPlan as ProcessExecutionPlan
from trainparity._internal.protocols import ProcessResumeCase as ProcessResumeCase
from trainparity._internal.protocols import RunsCase as RunsCase
from trainparity._internal.protocols import TrainingState as TrainingState
