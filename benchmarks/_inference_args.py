"""The command line of ``python -m benchmarks inference`` (both modes), apart from the
benchmark itself so that the module of each mode stays about one thing."""

from __future__ import annotations

import argparse

from benchmarks.lossless import DATASETS

__all__ = ["parse"]


def parse(argv: list[str], description: str | None) -> argparse.Namespace:
    """The options, checked; ``description``: the benchmark's docstring, for ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks inference",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", default="default_credit", choices=DATASETS)
    parser.add_argument("--hosts", type=int, default=None, help="default 1 (or the model files')")
    parser.add_argument("--trees", type=int, default=25)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--key-bits",
        type=int,
        default=1024,
        choices=[1024, 2048, 3072],
        help="training only (below 2048: the explicit insecure opt-in)",
    )
    parser.add_argument("--workers", type=int, default=None, help="training crypto processes")
    parser.add_argument("--models", default=None, help="load model files here; skip training")
    parser.add_argument("--save-models", default=None, help="keep the trained model files here")
    parser.add_argument("--repeats", type=int, default=5, help="timed batches of every row")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--requests", type=int, default=50, help="timed requests per client")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests per client")
    parser.add_argument("--sequential", type=int, default=200, help="one-at-a-time requests")
    parser.add_argument("--max-batch", type=int, default=512)
    parser.add_argument("--max-wait-ms", type=float, default=0.0)
    parser.add_argument("--profile", default=None, help="write cProfile files here")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--endpoint",
        action="store_true",
        help="clients go through the guest's serving endpoint (mutual TLS); /metrics is "
        "scraped over the probe port before and after the load",
    )
    parser.add_argument(
        "--group", type=int, default=256, help="--endpoint: requests per message, batch phase"
    )
    args = parser.parse_args(argv)
    if args.models and args.save_models:
        parser.error("--models loads existing files; --save-models keeps trained ones")
    for name in ("repeats", "clients", "requests", "sequential", "group"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.group > 1024:
        parser.error("--group must be at most 1024 (the endpoint's requests in flight)")
    if args.warmup < 0 or args.max_wait_ms < 0:
        parser.error("--warmup and --max-wait-ms must be >= 0")
    if args.hosts is not None and args.hosts < 1:
        parser.error("--hosts must be at least 1")
    return args
