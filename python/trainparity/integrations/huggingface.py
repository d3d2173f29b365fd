"""`trainparity.integrations.huggingface`, a public path (docs/integrations.md): re-exports."""

from trainparity._internal.integrations.huggingface import HuggingFaceCase as HuggingFaceCase
from trainparity._internal.integrations.huggingface import NeedsUnpickling as NeedsUnpickling
from trainparity._internal.integrations.huggingface import (
    TrainParityCallback as TrainParityCallback,
)
from trainparity._internal.integrations.huggingface import (
    observe_huggingface_checkpoint as observe_huggingface_checkpoint,
)
from trainparity._internal.integrations.huggingface import output_dir as output_dir
from trainparity._internal.integrations.huggingface import resume_from as resume_from
