"""Model files loaded in fresh processes serve exactly the scores of the trained objects.

Each party is its own interpreter: two hosts load their files and serve from CSV feature
stores, and the guest loads its file and scores a batch and single requests, all over TLS 1.3
WebSockets with client certificates on loopback.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.serving.conftest import HOST_COLS, Trained

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

_HOST = textwrap.dedent(
    """
    import asyncio, sys
    from p2pboost import ArrayStore, HostModel, Node, serve_host

    name, folder, certs = sys.argv[1], sys.argv[2], sys.argv[3]

    async def main():
        model = HostModel.load(f"{folder}/{name}.json")
        store = ArrayStore.from_csv(f"{folder}/{name}.csv", "id")
        async with Node(name, listen="wss://127.0.0.1:0", peers={"a": None},
                        tls=f"{certs}/{name}") as node:
            print(node.address, flush=True)
            await serve_host(node, model, store, sessions=1)

    asyncio.run(main())
    """
)

_GUEST = textwrap.dedent(
    """
    import asyncio, json, sys
    import numpy as np
    from p2pboost import GuestModel, GuestPredictor, Node

    folder, certs, b, c = sys.argv[1:5]

    async def main():
        model = GuestModel.load(f"{folder}/guest.json")
        data = np.load(f"{folder}/guest.npz")
        async with Node("a", peers={"b": b, "c": c}, tls=f"{certs}/a") as node:
            async with GuestPredictor(node, model, output="margin") as p:
                batch = await p.predict_batch(data["ids"], data["X"])
                single = [await p.predict(int(i), x) for i, x in zip(data["ids"][:5], data["X"])]
        print(json.dumps({"batch": batch.tolist(), "single": [s.tolist() for s in single]}))

    asyncio.run(main())
    """
)


def _write_host_csv(path: Path, ids: np.ndarray, X: np.ndarray) -> None:
    header = "id," + ",".join(f"x{j}" for j in range(X.shape[1]))
    lines = [header]
    for i, row in zip(ids.tolist(), X, strict=True):
        lines.append(str(i) + "," + ",".join("" if np.isnan(v) else repr(float(v)) for v in row))
    path.write_text("\n".join(lines) + "\n")


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_fresh_processes_serve_identical_scores(
    trained: Trained, node_federation: Path, tmp_path: Path
) -> None:
    folder = tmp_path
    for name in ("guest.json", "b.json", "c.json"):
        (folder / name).write_text((trained.folder / name).read_text())
    for h in ("b", "c"):
        _write_host_csv(folder / f"{h}.csv", trained.ids, trained.X[:, HOST_COLS[h]])
    rows = np.arange(0, trained.ids.size, 2)
    np.savez(folder / "guest.npz", ids=trained.ids[rows], X=trained.guest_X(rows))

    hosts = [await _spawn(_HOST, h, str(folder), str(node_federation)) for h in ("b", "c")]
    try:
        async with asyncio.timeout(60):
            addresses = []
            for proc in hosts:
                assert proc.stdout is not None
                addresses.append((await proc.stdout.readline()).decode().strip())
            guest = await _spawn(_GUEST, str(folder), str(node_federation), *addresses)
            out, err = await guest.communicate()
            assert guest.returncode == 0, err.decode()
            for proc in hosts:
                assert await proc.wait() == 0  # each served its one session and exited
    finally:
        for proc in hosts:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    result = json.loads(out.decode().strip().splitlines()[-1])
    expected = trained.reference_margin(rows)
    assert np.array_equal(np.array(result["batch"]), expected)
    assert np.array_equal(np.array(result["single"]), expected[:5])
