"""Paillier engine against phe and against the arithmetic floor, in one run.

``python -m benchmarks crypto --key-bits 2048 [--n 150000] [--workers W]``

Measured side by side, each as the median of interleaved repeats (the machine is shared):

* ``encrypt_per_s``: :class:`CryptoEngine` (DJN fixed base, CRT tables) on ``W`` processes;
* ``phe_encrypt_per_s``: ``phe``'s ``public_key.encrypt`` on a pool of the same size;
* ``add_per_s``: ciphertext additions per second inside :func:`build_histogram`;
* ``floor_add_per_s``: a bare ``acc = acc * c % n2`` loop over the same ciphertexts;
* ``decrypt_per_s``: CRT decryption on the engine's pool;
* (table only) randomisers made ahead of time, and encryption using them;
* ``splitinfos_per_decrypt``: compress capacity for ``--n`` rows, binary task (grid packing);
* ``bytes_per_ciphertext``: wire bytes of a batch of 10,000 through ``codec.encode``.

It also prints the per-tree cost model of DESIGN.md section 2 with these rates.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from benchmarks._common import emit_json, print_table
from p2pboost.codec import encode
from p2pboost.crypto.engine import CryptoEngine, default_workers
from p2pboost.crypto.histogram import build_histogram
from p2pboost.crypto.packing import PackingSpec
from p2pboost.crypto.paillier import CiphertextBatch, generate_keypair
from p2pboost.gbdt.fixedpoint import choose_grid

_PHE_KEY: Any = None


def _phe_encrypt(n: int, values: list[int]) -> list[int]:
    """Worker: phe's public-key encryption, as a phe user would call it."""
    global _PHE_KEY
    from phe import paillier

    if _PHE_KEY is None or _PHE_KEY.n != n:
        _PHE_KEY = paillier.PaillierPublicKey(n)
    return [_PHE_KEY.encrypt(v).ciphertext(be_secure=False) for v in values]


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks crypto", description=__doc__)
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--n", type=int, default=150_000, help="rows, for the packing capacity")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    bits, workers, repeats = args.key_bits, args.workers, args.repeats
    scale = (2048 / bits) ** 2  # cost of a product grows about quadratically with the key
    n_enc = int(2500 * workers * scale)
    n_phe = max(8 * workers, n_enc // 25)
    n_dec = max(64, n_enc // 8)
    n_add = int(60_000 * scale)

    t0 = time.perf_counter()
    public_key, private_key = generate_keypair(bits, allow_insecure=bits < 2048)
    keygen_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    packed = [int(v) for v in rng.integers(0, 2**62, n_enc)]  # packed g/h: about 105 bits
    packed = [v << 43 | v for v in packed]

    context = multiprocessing.get_context("spawn")
    with (
        CryptoEngine(public_key, private_key, workers=workers) as engine,
        ProcessPoolExecutor(workers, mp_context=context) as phe_pool,
    ):
        t0 = time.perf_counter()
        engine.encrypt_batch_blocking(packed[: 64 * workers])  # start workers, build tables
        setup_s = time.perf_counter() - t0
        list(phe_pool.map(_phe_encrypt, [int(public_key.n)] * workers, [[1]] * workers))

        n_int = int(public_key.n)
        chunk = max(1, n_phe // (4 * workers))
        phe_chunks = [packed[i : i + chunk] for i in range(0, n_phe, chunk)]
        enc_rates, phe_rates, dec_rates = [], [], []
        ciphertexts: list[Any] = []
        for _ in range(repeats):
            t = _timed(
                lambda: ciphertexts.__setitem__(slice(None), engine.encrypt_batch_blocking(packed))
            )
            enc_rates.append(_rate(n_enc, t))
            t = _timed(
                lambda: list(phe_pool.map(_phe_encrypt, [n_int] * len(phe_chunks), phe_chunks))
            )
            phe_rates.append(_rate(n_phe, t))
            t = _timed(lambda: engine.decrypt_batch_blocking(ciphertexts[:n_dec]))
            dec_rates.append(_rate(n_dec, t))
        assert engine.decrypt_batch_blocking(ciphertexts[:100]) == packed[:100]
        # Randomisers made ahead of time (while the guest would wait), then used.
        precompute_s = _timed(lambda: engine.precompute_blocking(n_enc))
        stashed_s = _timed(lambda: engine.encrypt_batch_blocking(packed))

    # Histogram accumulation against the bare loop, single process, same ciphertexts.
    n_rows = max(n_add // 4, 1)
    rows_ct = [ciphertexts[i % len(ciphertexts)] for i in range(n_rows)]
    bins = rng.integers(0, 32, (n_rows, 4)).astype(np.uint8)
    n2 = public_key.n2
    cells = 4 * 32
    additions = 4 * n_rows - cells  # the first row of a cell costs no product
    add_rates, floor_rates = [], []

    def floor_loop() -> None:
        for _ in range(4):
            acc = rows_ct[0]
            for c in rows_ct:
                acc = acc * c % n2

    for _ in range(repeats):
        t = _timed(lambda: build_histogram(public_key, bins, 32, [rows_ct]))
        add_rates.append(_rate(additions, t))
        floor_rates.append(_rate(4 * n_rows, _timed(floor_loop)))

    g = rng.uniform(-1, 1, args.n)
    h = rng.uniform(0, 0.25, args.n)
    spec = PackingSpec.for_grids(
        args.n, choose_grid(g, args.n), choose_grid(h, args.n), key_bits=bits
    )
    paper = PackingSpec.for_precision(args.n, key_bits=bits, g_max=1.0, h_max=0.25)
    wire = [ciphertexts[i % len(ciphertexts)] for i in range(10_000)]
    wire_bytes = len(encode(CiphertextBatch.from_ciphertexts(public_key, wire))) / 10_000

    med = statistics.median
    result = {
        "benchmark": "crypto",
        "key_bits": bits,
        "encrypt_per_s": round(med(enc_rates), 1),
        "phe_encrypt_per_s": round(med(phe_rates), 1),
        "add_per_s": round(med(add_rates), 1),
        "floor_add_per_s": round(med(floor_rates), 1),
        "decrypt_per_s": round(med(dec_rates), 1),
        "splitinfos_per_decrypt": spec.split_infos_per_plaintext,
        "bytes_per_ciphertext": round(wire_bytes, 3),
    }
    # Cost model per tree (DESIGN.md section 2) with these rates: 10 host features, 32 bins,
    # depth 5 (15 split nodes).
    m, b, depth, nodes = 10, 32, 5, 15
    c = spec.split_infos_per_plaintext
    model = {
        "encrypt": args.n / result["encrypt_per_s"],
        "add": args.n * m * (1 + (depth - 1) / 2) / result["add_per_s"],
        "add_floor": args.n * m * (1 + (depth - 1) / 2) / result["floor_add_per_s"],
        "decrypt": nodes * m * b / c / result["decrypt_per_s"],
    }
    rows: list[tuple[str, Any]] = [
        ("key bits / workers", f"{bits} / {workers}"),
        ("key generation (s)", keygen_s),
        ("engine start + tables (s)", setup_s),
        ("encrypt/s p2pboost (median)", result["encrypt_per_s"]),
        ("encrypt/s phe, same pool size", result["phe_encrypt_per_s"]),
        ("  speed-up", result["encrypt_per_s"] / result["phe_encrypt_per_s"]),
        ("  randomisers made ahead/s", _rate(n_enc, precompute_s)),
        ("  encrypt/s with them (critical path)", _rate(n_enc, stashed_s)),
        ("additions/s in histograms (1 core)", result["add_per_s"]),
        ("additions/s bare loop floor (1 core)", result["floor_add_per_s"]),
        ("  ratio", result["add_per_s"] / result["floor_add_per_s"]),
        ("decrypt/s", result["decrypt_per_s"]),
        (f"split-infos per decryption, n={args.n} (grid)", c),
        ("  same, paper encoding r=53", paper.split_infos_per_plaintext),
        ("packed row bits (grid)", spec.row_bits[0]),
        ("wire bytes per ciphertext", result["bytes_per_ciphertext"]),
        ("  2 * key bytes", 2 * bits // 8),
        ("samples enc / phe / dec / add", f"{n_enc} / {n_phe} / {n_dec} / {additions}"),
        (f"model: encrypt {args.n} rows (s)", model["encrypt"]),
        (f"model: additions, m={m}, depth={depth} (s, 1 core)", model["add"]),
        ("model: same at the floor (s, 1 core)", model["add_floor"]),
        (f"model: decryptions, {nodes} nodes x {m} x {b} bins (s)", model["decrypt"]),
    ]
    print_table(rows, f"crypto benchmark ({os.cpu_count()} cpus)")
    emit_json(result)
    return 0
