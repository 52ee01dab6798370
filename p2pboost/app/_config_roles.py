"""Who a party is in its federation and what it does: :class:`Role` and :class:`Task`.

Apart from :mod:`p2pboost.app.config` (which re-exports both) because the readers of the
file's tables (:mod:`p2pboost.app._config_tables`) check keys against the party's role, and
the whole configuration (:class:`~p2pboost.app.config.PartyConfig`) is built from those
readers: both need the roles, and neither may import the other's module.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Role", "Task"]


class Role(StrEnum):
    """What a party is in its federation."""

    GUEST = "guest"  # hetero: holds the labels, drives training
    HOST = "host"  # hetero: holds features only
    SERVER = "server"  # homo: coordinates, holds no data
    CLIENT = "client"  # homo: holds rows with labels

    @property
    def hetero(self) -> bool:
        return self in (Role.GUEST, Role.HOST)


class Task(StrEnum):
    """What ``p2pboost party`` does with the node."""

    PSI = "psi"
    TRAIN = "train"
    PREDICT = "predict"
    SERVE = "serve"
