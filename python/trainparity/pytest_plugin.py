"""`trainparity.pytest_plugin`, a public path (docs/api.md, "Module paths"): re-exports from trainparity._internal.pytest_plugin."""

from trainparity._internal.pytest_plugin import (
    pytest_assertrepr_compare as pytest_assertrepr_compare,
)
from trainparity._internal.pytest_plugin import pytest_configure as pytest_configure
from trainparity._internal.pytest_plugin import (
    pytest_runtest_makereport as pytest_runtest_makereport,
)
from trainparity._internal.pytest_plugin import (
    trainparity_shared_warm_servers as trainparity_shared_warm_servers,
)
from trainparity._internal.pytest_plugin import trainparity_workdir as trainparity_workdir
