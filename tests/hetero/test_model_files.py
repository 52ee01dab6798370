"""Per-party model files: each holds only its own secrets, and reloads to the same predictions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import pytest

from p2pboost.exceptions import ModelError
from p2pboost.gbdt.params import BoostParams
from p2pboost.hetero.model import GuestModel, HostModel
from p2pboost.testing import TRAINING, MemoryFabric, local_federation
from tests.hetero.conftest import Keys, federate, predict

ROOT = Path(__file__).resolve().parents[2]

#: Runs in a fresh interpreter: load the three files, predict through the protocol, print.
_PREDICT = textwrap.dedent(
    """
    import asyncio, json, sys
    import numpy as np
    from p2pboost.hetero.model import GuestModel, HostModel
    from p2pboost.net.node import Node
    from p2pboost.hetero.inference.batch import guest_predict, host_predict
    from p2pboost.transports.memory import MemoryNetwork, MemoryTransport

    folder = sys.argv[1]
    guest = GuestModel.load(f"{folder}/guest.json")
    hosts = [HostModel.load(f"{folder}/{h}.json") for h in guest.hosts]
    data = np.load(f"{folder}/rows.npz")

    async def main():
        net = MemoryNetwork()
        nodes = {
            h: Node(h, listen=f"mem://{h}", peers={"a": None}, transport=MemoryTransport(net, h))
            for h in guest.hosts
        }
        a = Node("a", peers={h: f"mem://{h}" for h in guest.hosts},
                 transport=MemoryTransport(net, "a"))
        for node in [*nodes.values(), a]:
            await node.start()

        async def g():
            async with a.session("p", peers=list(guest.hosts)) as s:
                return await guest_predict(s, guest, data["guest"])

        async def h(name, model):
            async with nodes[name].session("p", peers=["a"]) as s:
                await host_predict(s, model, data[name])

        out = await asyncio.gather(g(), *(h(n, m) for n, m in zip(guest.hosts, hosts)))
        for node in [a, *nodes.values()]:
            await node.close()
        return out[0]

    margin = asyncio.run(main())
    print(json.dumps(margin.tolist()))
    """
)


@pytest.mark.slow
async def test_files_hold_only_their_party_secrets_and_reload_in_a_fresh_process(
    breast: tuple[np.ndarray, np.ndarray], pool: Executor, keys: Keys, tmp_path: Path
) -> None:
    X, y = breast
    Xg, Xb, Xc = X[:, :8], X[:, 8:20], X[:, 20:]
    params = BoostParams(n_estimators=2, max_depth=3, max_bin=16)
    async with local_federation(MemoryFabric(), ["a", "b", "c"], TRAINING) as c:
        fed = await federate(c, Xg, y, [Xb, Xc], params, pool, keys)
        margin = await predict(c, fed, Xg, [Xb, Xc])
    fed.guest.save(tmp_path / "guest.json")
    for name, model in zip(["b", "c"], fed.hosts, strict=True):
        model.save(tmp_path / f"{name}.json")
    np.savez(tmp_path / "rows.npz", guest=Xg, b=Xb, c=Xc)

    guest_text = (tmp_path / "guest.json").read_text()
    guest_file = json.loads(guest_text)
    host_files = [json.loads((tmp_path / f"{h}.json").read_text()) for h in ("b", "c")]
    # Every party's file carries the same fingerprint.
    assert {f["fingerprint"] for f in [guest_file, *host_files]} == {fed.guest.fingerprint}
    # The guest's file: nothing about host splits but their owner.
    for tree in guest_file["trees"]:
        for node, owner in enumerate(tree["owner"]):
            if owner > 0:
                assert tree["feature"][node] == -1
                assert tree["threshold_bin"][node] == -1
                assert tree["threshold"][node] is None
    assert any(o > 0 for t in guest_file["trees"] for o in t["owner"])
    host_thresholds = {s["threshold"] for f in host_files for s in f["splits"]}
    assert all(repr(t) not in guest_text for t in host_thresholds if t is not None)
    # A host's file: only its own splits; no leaf value, gain, cover, label or gradient.
    for f in host_files:
        assert set(f) == {"format", "version", "fingerprint", "guest", "n_features", "splits"}
        for s in f["splits"]:
            assert set(s) == {"tree", "node", "feature", "bin", "threshold", "default_left"}
    host_text = "".join((tmp_path / f"{h}.json").read_text() for h in ("b", "c"))
    leaf_values = {float(v) for t in fed.guest.trees for v in t.value[t.owner < 0, 0]}
    assert all(repr(v) not in host_text for v in leaf_values if abs(v) > 1e-3)

    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _PREDICT, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    reloaded = np.asarray(json.loads(out.stdout.strip().splitlines()[-1]))
    np.testing.assert_array_equal(reloaded, margin)


def test_loading_rejects_foreign_or_broken_files(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "p2pboost.hetero.host", "version": 99}))
    with pytest.raises(ModelError, match="version"):
        HostModel.load(path)
    with pytest.raises(ModelError, match="not a"):
        GuestModel.load(path)
    path.write_text("{not json")
    with pytest.raises(ModelError, match="cannot read"):
        GuestModel.load(path)
    path.write_text(
        json.dumps(
            {
                "format": "p2pboost.hetero.host",
                "version": 1,
                "fingerprint": "f",
                "guest": "a",
                "n_features": 2,
                "splits": [
                    {
                        "tree": 0,
                        "node": 0,
                        "feature": 5,
                        "bin": 1,
                        "threshold": 1.0,
                        "default_left": True,
                    }
                ],
            }
        )
    )
    with pytest.raises(ModelError, match="feature out of range"):
        HostModel.load(path)
