"""What check_runs runs: the variants of one script, shared by the check and its execution."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["REPEATS", "VARIANT_NAME", "RunVariant"]

REPEATS = ("a", "b")  # every variant runs twice: a variant must agree with itself
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # it names directories


@dataclass(frozen=True)
class RunVariant:
    """One configuration of the case's script: arguments appended to its command, environment added."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, declared: object) -> RunVariant:
        """A RunVariant from a RunVariant, or a mapping with the keys `args` and `env`."""
        if isinstance(declared, RunVariant):
            variant = declared
        elif isinstance(declared, Mapping):
            unknown = sorted(set(declared) - {"args", "env"})
            if unknown:
                raise ValueError(f"variant {name!r}: unknown keys {unknown} (use 'args' and 'env')")
            args = declared.get("args", ())
            if isinstance(args, str):
                raise TypeError(f"variant {name!r}: args must be a list of str, not one string")
            variant = cls(args=tuple(args), env=dict(declared.get("env", {})))
        else:
            raise TypeError(
                f"variant {name!r} must be a RunVariant or a mapping with 'args' and 'env', "
                f"not {type(declared).__name__}"
            )
        if not all(isinstance(item, str) and "\0" not in item for item in variant.args):
            raise TypeError(f"variant {name!r}: args must be str without NUL characters")
        for key, value in variant.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"variant {name!r}: env keys and values must be str")
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"variant {name!r}: invalid environment variable {key!r}")
        return cls(args=variant.args, env=dict(variant.env))
