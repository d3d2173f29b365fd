"""`trainparity.phase_plan`: the phase plan a training process reads, a documented path kept as a face; see docs/api.md."""

from trainparity.cases.phase_plan import PHASE_VARIABLES as PHASE_VARIABLES
from trainparity.cases.phase_plan import PhasePlan as PhasePlan
from trainparity.cases.phase_plan import current_phase_plan as current_phase_plan
from trainparity.cases.phase_plan import plan_command as plan_command
from trainparity.cases.phase_plan import plan_environment as plan_environment
