"""The transports' old import name, ``transports``, kept working for one release.

Until 0.1 the transports installed as a top-level package named ``transports``: a generic
name that another project's package can hold too, and then one of the two overwrites the
other in a user's site-packages. They now install as :mod:`p2pboost.transports`, and the
documentation used the old name (``transports.websocket.WebSocketTransport``,
``transports.errors``), so code written against it keeps working for this release: once
p2pboost is imported, ``import transports`` and ``import transports.errors`` give the modules
of :mod:`p2pboost.transports`, with a :class:`DeprecationWarning` naming the new import.

The alias never takes a name from anyone: its finder sits at the end of ``sys.meta_path``,
so it answers only when no installed package called ``transports`` exists. Each old module is
a module of its own whose names are the very objects of the new one (``except
transports.errors.TransportError`` catches what p2pboost raises). Nothing imports p2pboost's
transports before an old name is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["install"]

OLD = "transports"
NEW = "p2pboost.transports"


class _OldTransportsName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``transports`` and ``transports.*`` as aliases of ``p2pboost.transports[.*]``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != OLD and not fullname.startswith(OLD + "."):
            return None
        new = NEW + fullname[len(OLD) :]
        if importlib.util.find_spec(new) is None:
            return None  # no such module under the new name either: ModuleNotFoundError
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname == OLD)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a fresh module: the new one keeps its own name and spec

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        new_name = NEW + name[len(OLD) :]
        warnings.warn(
            f"the module {name!r} is now {new_name!r}: import it from there (the old name"
            " goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        new = importlib.import_module(new_name)
        for key, value in vars(new).items():
            if key not in ("__name__", "__spec__", "__loader__", "__path__", "__package__"):
                setattr(module, key, value)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _OldTransportsName) for f in sys.meta_path):
        sys.meta_path.append(_OldTransportsName())
