"""A package face whose public names load on first use (PEP 562), one implementation for all.

`import trainparity`, `trainparity._internal.why.forensics` and `trainparity._internal.accumulation`
each name what they export and the module it lives in; a name is imported
from there the first time it is asked for, then kept in the package. That
keeps torch (and the orchestrators) out of processes that only need a
package's light parts: a check's own process, the accumulation worker, a
training script's `record()`. Imports nothing of trainparity's.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_face"]


def lazy_face(
    package: str,
    defined_in: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    submodules: bool = False,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`, whose names live in the modules `defined_in` gives.

    `namespace` is the package's globals(): a loaded name is kept there, so
    it is looked up once. With `submodules`, an unknown name that is one of
    the package's submodules imports it (`trainparity.api.X` after a bare
    `import trainparity`, as when the package imported its submodules eagerly).
    """

    def __getattr__(name: str) -> Any:
        module = defined_in.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            namespace[name] = value
            return value
        if (
            submodules
            and not name.startswith("__")
            and importlib.util.find_spec(f"{package}.{name}") is not None
        ):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *defined_in})

    return __getattr__, __dir__
