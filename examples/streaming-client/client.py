"""Stream scoring requests to a running ``p2pboost serve`` endpoint and print the scores.

Reads customers from a CSV with the guest's features (an id column, the feature columns in
the model's order, optionally a label column, which is skipped), sends one request per row
without waiting for replies (pipelining: the endpoint micro-batches them), and prints
``id,score`` lines in the CSV's order. Requests that fail print ``id,,ErrorType: message``.
A summary goes to stderr.

The connection is mutual TLS: this application presents its own certificate from the
federation's CA (``p2pboost certs request`` here, ``p2pboost certs sign`` by the CA holder).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from p2pboost.certs import TLSConfig
from p2pboost.exceptions import P2PBoostError
from p2pboost.hetero.inference.endpoint import stream_scores


def read_requests(
    path: Path, id_column: str, skip: set[str], limit: int | None
) -> Iterator[dict[str, Any]]:
    """One request per CSV row: integer ids stay integers, empty cells are missing (null)."""
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        for n, row in enumerate(reader):
            if limit is not None and n >= limit:
                return
            raw = row.pop(id_column)
            features = [float(v) if v != "" else None for k, v in row.items() if k not in skip]
            yield {"id": int(raw) if raw.lstrip("-").isdigit() else raw, "features": features}


async def run(args: argparse.Namespace) -> int:
    tls = TLSConfig.from_dir(args.certs) if args.certs else None
    requests = read_requests(args.csv, args.id_column, set(args.skip), args.limit)
    t0 = time.perf_counter()
    n = failed = 0
    async for reply in stream_scores(args.url, requests, tls=tls, group=args.group):
        n += 1
        if "error" in reply:
            failed += 1
            print(f"{reply['id']},,{reply['error']['type']}: {reply['error']['message']}")
        else:
            print(f"{reply['id']},{reply['score']!r}")
    seconds = time.perf_counter() - t0
    print(
        f"{n} replies ({failed} errors) in {seconds:.2f} s: {n / seconds:,.0f} requests/s",
        file=sys.stderr,
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="wss://127.0.0.1:8765", help="The endpoint.")
    parser.add_argument("--certs", type=Path, help="This client's certificate directory.")
    parser.add_argument("--csv", type=Path, required=True, help="Rows to score.")
    parser.add_argument("--id-column", default="id")
    parser.add_argument("--skip", nargs="*", default=["y"], help="Columns that are not features.")
    parser.add_argument("--limit", type=int, help="Score only the first N rows.")
    parser.add_argument(
        "--group", type=int, default=1, help="Requests per message (more throughput)."
    )
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run(args))
    except P2PBoostError as exc:
        print(f"client.py: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
