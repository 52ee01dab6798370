"""Run one benchmark: ``python -m benchmarks NAME [options]``.

Each benchmark lives in ``benchmarks/NAME.py`` and exposes ``main(argv: list[str]) -> int``.
It prints a readable table and, as its very last line, one JSON object (see README.md here).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def _available() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def main(argv: list[str]) -> int:
    names = _available()
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: python -m benchmarks NAME [options]\n\nbenchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(f"unknown benchmark {name!r}; choose one of: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{name}")
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
