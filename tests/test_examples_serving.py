"""The serving examples run as their READMEs say, each party its own process, on loopback.

``examples/embedding/train.py`` prepares data, certificates, models and the reference scores
(one federated batch prediction); then the aiohttp service with its host, and the streaming
client against ``p2pboost serve``, must give exactly those scores.
"""

from __future__ import annotations

import contextlib
import csv
import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: Whole federations of processes or real sockets: seconds each (see CONTRIBUTING.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EMBEDDING = ROOT / "examples" / "embedding"
CLIENT = ROOT / "examples" / "streaming-client" / "client.py"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class Work:
    path: Path
    host_port: int
    serve_port: int
    scores: dict[int, float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_scores(lines: Iterator[str] | list[str]) -> dict[int, float]:
    return {int(row[0]): float(row[1]) for row in csv.reader(lines) if row and row[0] != "id"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Work:
    out = tmp_path_factory.mktemp("serving-examples")
    host_port, serve_port = _free_port(), _free_port()
    args = ["--out", str(out), "--trees", "2", "--host-port", str(host_port)]
    done = subprocess.run(
        [sys.executable, str(EMBEDDING / "train.py"), *args, "--serve-port", str(serve_port)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "held-out accuracy" in done.stdout
    with (out / "scores.csv").open(newline="") as file:
        scores = _read_scores(list(file))
    assert len(scores) == 569
    return Work(out, host_port, serve_port, scores)


def test_the_training_example_runs_again_in_the_same_directory(tmp_path: Path) -> None:
    """Run twice into one directory: the second run reuses the keys instead of failing."""
    for attempt in range(2):
        done = subprocess.run(
            [sys.executable, str(EMBEDDING / "train.py"), "--out", str(tmp_path), "--trees", "1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert ("reusing the certificates" in done.stdout) == (attempt == 1)


@contextlib.contextmanager
def started(args: list[str], log: Path, cwd: Path = ROOT) -> Iterator[queue.Queue[str]]:
    """A process whose stdout lines arrive in the yielded queue; stopped with SIGTERM."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True
        )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        assert proc.stdout is not None
        proc.stdout.close()


def first_line(lines: queue.Queue[str], prefix: str, log: Path) -> str:
    try:
        line = lines.get(timeout=START_TIMEOUT)
    except queue.Empty:
        pytest.fail(f"no {prefix!r} line in {START_TIMEOUT} s:\n{log.read_text()}")
    assert line.startswith(prefix), (line, log.read_text())
    return line.removeprefix(prefix).strip()


def wait_listening(port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    pytest.fail(f"nothing listens on port {port} after {START_TIMEOUT} s:\n{log.read_text()}")


def post(url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_embedding_service_serves_the_batch_scores(work: Work, tmp_path: Path) -> None:
    host_log, service_log = tmp_path / "host.log", tmp_path / "service.log"
    host_args = [str(EMBEDDING / "host.py"), "--work", str(work.path), "--listen"]
    with started([*host_args, "wss://127.0.0.1:0"], host_log) as host:
        host_url = first_line(host, "host answering at", host_log)
        service_args = [str(EMBEDDING / "service.py"), "--work", str(work.path)]
        with started(
            [*service_args, "--host-url", host_url, "--port", "0"], service_log
        ) as service:
            url = first_line(service, "service listening on", service_log) + "/predict"
            ids = sorted(work.scores)[::7]
            singles = [post(url, {"id": i}) for i in ids[:5]]
            status, batch = post(url, {"ids": ids})
            unknown = post(url, {"id": 5})
            bad = post(url, b"{not json")
    assert singles == [(200, {"id": i, "score": work.scores[i]}) for i in ids[:5]]
    assert status == 200
    assert batch["scores"] == [work.scores[i] for i in ids]
    assert unknown[0] == 404
    assert unknown[1]["error"]["type"] == "UnknownIdError"
    assert bad == (400, {"error": {"type": "InputError", "message": "the body must be JSON"}})


def test_streaming_client_against_p2pboost_serve(work: Work, tmp_path: Path) -> None:
    host_log, guest_log = tmp_path / "host.log", tmp_path / "guest.log"
    serve = ["-m", "p2pboost.app.cli", "--quiet", "serve", "--config"]
    with started([*serve, "host.toml"], host_log, cwd=work.path):
        wait_listening(work.host_port, host_log)
        with started([*serve, "guest.toml"], guest_log, cwd=work.path):
            wait_listening(work.serve_port, guest_log)
            url = f"wss://127.0.0.1:{work.serve_port}"
            client = ["--url", url, "--certs", "certs/app", "--csv", "guest.csv"]
            done = subprocess.run(
                [sys.executable, str(CLIENT), *client],
                cwd=work.path,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    assert done.returncode == 0, done.stderr
    assert "569 replies (0 errors)" in done.stderr
    lines = done.stdout.splitlines()
    assert [int(line.split(",")[0]) for line in lines] == sorted(work.scores)  # in CSV order
    assert _read_scores(lines) == work.scores
