"""Per-round checkpoints of horizontal training: a restarted server continues where it was.

In a horizontal run only the server holds state that outlives a round: the model so far (the
union's bin edges, base margin, trees, history) and the random generator that draws the next
rounds' columns. A client holds nothing the server cannot give back: its margins are its
rows through the model so far, which the server sends every client at the start of a run
(the warm-start path: the model header, then every finished tree). So:

* **the server** writes, after every round, a :class:`ServerCheckpoint`: that model (a
  :class:`~p2pboost.gbdt.booster.Booster` with the generator's state), how many of its rounds
  a warm start brought (they do not count towards ``n_estimators``), the digest of the shared
  settings (:meth:`~p2pboost.homo.config.HomoConfig.digest`) and the clients. Started again
  with ``resume``, it continues from that round: the clients receive the model so far, row
  sampling is a function of the round (:mod:`p2pboost.homo._sampling`) and the generator
  continues, so the trees that follow are an uninterrupted run's.
* **a client** that restarts rejoins the running server (the server's
  :class:`~p2pboost.homo._federation.Federation` readmits it, replaying the model so far and
  regrowing the current tree with it), and a client whose server restarted joins the new run;
  neither needs a file.

A checkpoint of other settings or other clients is refused, naming what differs; a corrupted
or foreign file too (:mod:`p2pboost.checkpoint_files`). The server cannot check the
clients' rows (they are theirs): a client that comes back with other rows changes the model
from then on. A differentially private run does not resume (its budget was spent on the rows
each ensemble drew; the draw would be repeated).

What the file reveals is what the model file holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from p2pboost.checkpoint_files import read_checkpoint, write_checkpoint
from p2pboost.exceptions import CheckpointError, ModelError
from p2pboost.gbdt.booster import Booster
from p2pboost.homo.config import HomoConfig

__all__ = ["ServerCheckpoint", "server_checkpoint_path"]

_SERVER = "homo-server-checkpoint"


def server_checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    """Where a horizontal server keeps its checkpoint in ``directory``."""
    return Path(directory) / "homo-server.ckpt"


@dataclass(frozen=True, eq=False)
class ServerCheckpoint:
    """The server's state after a round (see the module docstring)."""

    model: Booster
    warm_rounds: int
    settings: dict[str, str]
    clients: list[str]

    def save(self, directory: str | os.PathLike[str]) -> None:
        write_checkpoint(
            server_checkpoint_path(directory),
            _SERVER,
            {
                "model": json.dumps(self.model.to_dict()),  # JSON: the generator's state
                "warm_rounds": self.warm_rounds,
                "settings": self.settings,
                "clients": list(self.clients),
            },
        )

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ServerCheckpoint | None:
        """The directory's server checkpoint, or None if it has none."""
        path = server_checkpoint_path(directory)
        if not path.exists():
            return None
        body = read_checkpoint(path, _SERVER)
        try:
            model = Booster.from_dict(json.loads(body["model"]))
            settings = {str(k): str(v) for k, v in dict(body["settings"]).items()}
            clients = [str(c) for c in body["clients"]]
            warm = int(body["warm_rounds"])
        except (KeyError, TypeError, ValueError, ModelError) as exc:
            raise CheckpointError(f"invalid server checkpoint {str(path)!r}: {exc}") from None
        if not 0 <= warm <= model.n_rounds or model.rng_state is None:
            raise CheckpointError(f"invalid server checkpoint {str(path)!r}: inconsistent rounds")
        return cls(model, warm, settings, clients)

    def check(self, config: HomoConfig, clients: Sequence[str]) -> None:
        """Refuse to continue with other settings or other clients, naming what differs."""
        differ = config.differences(self.settings)
        if differ:
            raise CheckpointError(
                "the checkpoint was written with other settings ("
                + "; ".join(
                    d.replace(" at the server, ", " then, ").replace(" here", " now")
                    for d in differ
                )
                + "): resume with the settings it was trained with, or start afresh"
            )
        if sorted(clients) != sorted(self.clients):
            raise CheckpointError(
                f"the checkpoint was written for clients {sorted(self.clients)}, not "
                f"{sorted(clients)}: resume with the same clients, or start afresh"
            )
