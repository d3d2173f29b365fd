"""The code blocks of README.md and the guides, and how each relates to the files the tests run.

A Python block is one of four kinds, said by an HTML comment on the line
before it (invisible on the rendered page):

- `<!-- file: PATH -->`: the whole file PATH (relative to the page's folder);
- `<!-- recipe: PATH -->`: an excerpt: every line is in PATH, in PATH's
  order; a line that is only `...` stands for lines left out;
- `<!-- fragment: WHY -->`: not runnable on its own, WHY says so;
- no comment: a complete program, which tests/test_doc_code_blocks.py runs.

So a new block either runs or says why not: none escapes by looking complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
ELISION = "..."

_BLOCK = re.compile(
    r"(?:^<!-- (?P<kind>file|recipe|fragment): (?P<argument>[^\n]*?) -->\n)?"
    r"^```(?P<language>[\w-]*)\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class CodeBlock:
    page: Path
    line: int
    language: str
    code: str
    kind: str | None  # "file", "recipe", "fragment", or None for a complete program
    argument: str | None  # the file (relative to the page's folder), or why it is a fragment

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def source(self) -> Path:
        assert self.kind in ("file", "recipe") and self.argument
        return self.page.parent / self.argument


def code_blocks(page: Path, language: str = "python") -> list[CodeBlock]:
    text = page.read_text(encoding="utf-8")
    return [
        CodeBlock(
            page,
            text.count("\n", 0, match.start("code")) + 1,
            match["language"],
            match["code"],
            match["kind"],
            match["argument"],
        )
        for match in _BLOCK.finditer(text)
        if match["language"] == language
    ]


def excerpt_mismatch(block: CodeBlock) -> str | None:
    """None when the block is what its marker says it is, else what is wrong."""
    source = block.source.read_text(encoding="utf-8")
    if block.kind == "file":
        return None if block.code == source else f"{block.where} differs from {block.source.name}"
    lines = source.splitlines()
    position = 0
    for line in block.code.splitlines():
        if not line.strip() or line.strip() == ELISION:
            continue
        if line not in lines[position:]:
            return f"{block.where}: {line!r} is not in {block.source.name} (after line {position})"
        position = lines.index(line, position) + 1
    return None
