"""One run of a party's task: :class:`Run`, what every task runner is given, and the session
names the tasks open.

Apart from :mod:`p2pboost.app.party` because the task runners live in more than one module
(PSI and training there, prediction and serving in :mod:`p2pboost.app._party_predict`), and
each needs the run's context without importing the module that dispatches to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2pboost.app._plan import Plan
from p2pboost.app._progress import PartyResult, Reporter
from p2pboost.app._tables import Table, load_table
from p2pboost.app.config import PartyConfig
from p2pboost.exceptions import ConfigError
from p2pboost.workers import ClusterPool

__all__ = ["HETERO_SESSION", "HOMO_SESSION", "SERVE_PREFIX", "Run"]

#: The estimators' session names (:mod:`p2pboost.hetero.estimators`,
#: :mod:`p2pboost.homo.estimators`).
HETERO_SESSION = "p2pboost-hetero"
HOMO_SESSION = "p2pboost-homo"
SERVE_PREFIX = "p2pboost-serve"


@dataclass(frozen=True, slots=True)
class Run:
    """One task's context: the party's configuration, where its progress goes, its compute
    pool and, once agreed, its peers' plans; and the party's rows, read as its task needs them
    (:meth:`read` off the event loop)."""

    config: PartyConfig
    reporter: Reporter
    #: The party's cluster (``[compute]``), or None for the protocols' own pools.
    executor: ClusterPool | None = None
    #: The peers' plans, once agreed (:func:`~p2pboost.app._plan.agree`): a host learns the
    #: guest's tree count.
    plans: dict[str, Plan] = field(default_factory=dict)

    def result(self, outputs: Sequence[Path] = (), **summary: Any) -> PartyResult:
        c = self.config
        return PartyResult(c.id, c.role.value, c.task.value, tuple(map(str, outputs)), summary)

    def table(
        self,
        *,
        require_label: bool,
        path: Path | None = None,
        model_features: Sequence[str] | None = None,
        sparse: bool | str = False,
    ) -> Table:
        if self.config.data is None:  # the config check makes this unreachable for data roles
            raise ConfigError(f"{self.config.source}: a {self.config.role.value} needs [data]")
        return load_table(
            self.config.data,
            path,
            require_label=require_label,
            model_features=model_features,
            sparse=sparse,
        )

    async def read(
        self,
        *,
        require_label: bool,
        path: Path | None = None,
        model_features: Sequence[str] | None = None,
        sparse: bool | str = False,
    ) -> Table:
        """:meth:`table` in a worker thread: reading a large file must not hold the event
        loop, which keeps the node's connections and heart-beats going."""
        return await asyncio.to_thread(
            self.table,
            require_label=require_label,
            path=path,
            model_features=model_features,
            sparse=sparse,
        )

    @property
    def hosts(self) -> list[str]:
        return list(self.config.peers)

    @property
    def peer(self) -> str:
        return next(iter(self.config.peers))
