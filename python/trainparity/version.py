"""`trainparity.version`, a public path (docs/api.md, "Module paths"): re-exports from trainparity._internal.version."""

from trainparity._internal.version import (
    MACHINE_REPORT_SCHEMA_VERSION as MACHINE_REPORT_SCHEMA_VERSION,
)
from trainparity._internal.version import PACKAGE_VERSION as PACKAGE_VERSION
from trainparity._internal.version import add_report_metadata as add_report_metadata
