"""`trainparity.api`, a contract path: the front door's names (`trainparity.__all__`), loaded at once."""

from trainparity import *  # noqa: F403
from trainparity import __all__ as __all__
