"""Rendering of state paths: `model.layer[2].weight`, `extra["a.b"]`, `$` for the root.

A part is a str key, an int (a sequence index, or an int mapping key such as
a MultiStepLR milestone: `scheduler.milestones[2]`), or another plain scalar
mapping key, rendered as Python writes it (`[True]`, `[0.5]`, `[None]`).
"""

from __future__ import annotations

import json
import re

PathPart = str | int | float | bool | bytes | None
StatePath = tuple[PathPart, ...]

_COMPONENT = re.compile(r"[^.\[]+")


def render_path(path: StatePath) -> str:
    """Render a path tuple exactly as reports show it (docs/compatibility.md, "Snapshots")."""
    if not path:
        return "$"
    rendered: list[str] = []
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            rendered.append(f"[{part}]")
        elif isinstance(part, str) and part.isidentifier():
            rendered.append(f".{part}" if rendered else part)
        elif isinstance(part, str):
            rendered.append(f"[{json.dumps(part, ensure_ascii=False)}]")
        else:  # another scalar mapping key: never mistaken for the str of the same text
            rendered.append(f"[{part!r}]")
    return "".join(rendered)


def path_under(key: str, rendered: str) -> str:
    """A rendered path as seen from one level up, under the mapping key `key`.

    `path_under("rank1", "rng.torch")` is `rank1.rng.torch`, `path_under("rank1",
    '["a.b"]')` is `rank1["a.b"]`, and the root `$` becomes `rank1`: what
    render_path gives for the path with `key` in front.
    """
    head = render_path((key,))
    if rendered == "$":
        return head
    return head + rendered if rendered.startswith("[") else f"{head}.{rendered}"


def component_of(path: str) -> str:
    """The top-level component of a rendered path: `model` for `model["0.bias"]`."""
    match = _COMPONENT.match(path)
    return match.group(0) if match else path
