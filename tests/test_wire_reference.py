"""docs/reference/wire.md lists every protocol message exactly as the code defines it.

Run ``python -m tests.test_wire_reference`` to rewrite the generated section after changing a
message.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from p2pboost.protocols._messages import families, wire_reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "wire.md"
BEGIN, END = "<!-- messages:begin -->", "<!-- messages:end -->"
#: Every module that defines a message family (importing registers its messages).
FAMILY_MODULES = (
    "p2pboost.protocols.psi",
    "p2pboost.hetero._messages",
    "p2pboost.hetero._woe_messages",
    "p2pboost.homo._messages",
    "p2pboost.app._plan",
)
#: The families, in the order of the page.
ORDER = [
    "psi",
    "hetero-train",
    "hetero-predict",
    "hetero-serve",
    "hetero-woe",
    "homo",
    "party-plan",
]


def _library_families() -> set[str]:
    for name in FAMILY_MODULES:
        importlib.import_module(name)
    return {
        family
        for family, messages in families().items()
        if any(cls.__module__.startswith("p2pboost.") for cls in messages.values())
    }


def _generated() -> str:
    return wire_reference(ORDER)


def _section(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip()


def test_the_wire_page_lists_every_message_as_the_code_defines_it() -> None:
    assert _library_families() == set(ORDER), "add the new family to ORDER"
    assert _section(PAGE.read_text(encoding="utf-8")) == _generated().strip(), (
        "docs/reference/wire.md is out of date: run python -m tests.test_wire_reference"
    )


def test_every_message_says_who_sends_it_and_why() -> None:
    for family in _library_families():
        for tag, cls in families()[family].items():
            doc = cls.__dict__.get("__doc__") or ""
            assert "->" in doc or "Both ways" in doc, f"{family}/{tag}: say who sends it"


def _rewrite() -> None:
    _library_families()
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    PAGE.write_text(text[:start] + "\n" + _generated().strip() + "\n" + text[end:], "utf-8")


if __name__ == "__main__":
    _rewrite()
    sys.exit(0)
