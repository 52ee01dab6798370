"""The Markdown docs stay navigable: every relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_PAGES = sorted(
    p
    for p in [
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("benchmarks/*.md"),
        *ROOT.glob("examples/**/*.md"),
    ]
    if ".venv" not in p.parts
)


def test_there_are_docs_to_check() -> None:
    assert any(p.name == "README.md" and p.parent == ROOT for p in _PAGES)
    assert len(_PAGES) >= 5


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # external URL or in-page anchor
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing {broken}"
