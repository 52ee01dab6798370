"""An existing aiohttp service that embeds the guest's node: ``POST /predict`` returns scores.

The node and the :class:`~p2pboost.hetero.inference.predictor.GuestPredictor` live in the
application's ``cleanup_ctx``: they start with the service (dialling the host and checking that
both hold the same model) and close with it, and every request handler shares the one predictor, so
concurrent requests are micro-batched into one round trip to the host.

Requests name customers by id; the guest's own features come from its store (here
``guest.csv``; a real service would pass a ``CallbackStore`` reading its database)::

    POST /predict {"id": 100450}             -> {"id": 100450, "score": 0.97}
    POST /predict {"ids": [100450, 100451]}  -> {"ids": [...], "scores": [0.97, 0.02]}

Errors are JSON too: 400 for a bad request, 404 when the guest or the host lacks an id, 503
while the host is unreachable (the predictor fails fast and recovers by itself).

This is plain HTTP on 127.0.0.1: put it behind your organisation's usual authentication and
TLS before anything else may reach it. The party-to-party link is mutual TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from p2pboost.exceptions import InputError, P2PBoostError, UnknownIdError
from p2pboost.hetero.inference.feature_store import ArrayStore
from p2pboost.hetero.inference.predictor import GuestPredictor
from p2pboost.hetero.model import GuestModel
from p2pboost.net.node import Node

PREDICTOR = web.AppKey("predictor", GuestPredictor)
MAX_IDS = 10_000


def federation(work: Path, host_url: str) -> Callable[[web.Application], AsyncIterator[None]]:
    """The cleanup context: node and predictor up before the first request, down at exit."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        model = GuestModel.load(work / "guest-model.json")
        store = ArrayStore.from_csv(work / "guest.csv", "id", exclude=["y"])
        node = Node("guest", peers={"host": host_url}, tls=work / "certs" / "guest")
        async with node, GuestPredictor(node, model, guest_store=store) as predictor:
            app[PREDICTOR] = predictor
            yield

    return context


def check_id(value: Any) -> int | str:
    """Ids are integers (64-bit) or short strings; anything else is the client's mistake."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError("an id must be an integer or a string")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise InputError("an integer id must fit in 64 bits")
    if isinstance(value, str) and not 0 < len(value) <= 256:
        raise InputError("a string id must have 1 to 256 characters")
    return value


def error(status: int, exc: P2PBoostError) -> web.Response:
    body = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    return web.json_response(body, status=status)


async def predict(request: web.Request) -> web.Response:
    predictor = request.app[PREDICTOR]
    try:
        body = await request.json()
    except ValueError:
        return error(400, InputError("the body must be JSON"))
    try:
        if isinstance(body, dict) and set(body) == {"ids"} and isinstance(body["ids"], list):
            if len(body["ids"]) > MAX_IDS:
                raise InputError(f"at most {MAX_IDS} ids per request")
            ids = [check_id(i) for i in body["ids"]]
            if len({type(i) for i in ids}) > 1:
                raise InputError("ids must all be integers or all be strings")
            scores = await predictor.predict_batch(ids)
            return web.json_response({"ids": ids, "scores": scores.tolist()})
        if isinstance(body, dict) and set(body) == {"id"}:
            rid = check_id(body["id"])
            return web.json_response({"id": rid, "score": await predictor.predict(rid)})
        raise InputError('send {"id": ...} or {"ids": [...]}')
    except UnknownIdError as exc:
        return error(404, exc)
    except InputError as exc:
        return error(400, exc)
    except P2PBoostError as exc:  # host away, session closed: the client may retry
        return error(503, exc)


def make_app(work: Path, host_url: str) -> web.Application:
    app = web.Application(client_max_size=1 << 20)
    app.cleanup_ctx.append(federation(work, host_url))
    app.router.add_post("/predict", predict)
    return app


async def run(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(app)
    await runner.setup()  # runs the cleanup context's start: connects to the host
    try:
        await web.TCPSite(runner, host, port).start()
        address, bound = runner.addresses[0][:2]
        print(f"service listening on http://{address}:{bound}", flush=True)
        await asyncio.Event().wait()  # until Ctrl-C / SIGTERM cancels us
    finally:
        await runner.cleanup()


async def main_async(work: Path, host_url: str, host: str, port: int) -> None:
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await run(make_app(work, host_url), host, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("work"), help="train.py's --out.")
    parser.add_argument("--host-url", default="wss://127.0.0.1:8444", help="The host node.")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port (127.0.0.1).")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.work, args.host_url, "127.0.0.1", args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
