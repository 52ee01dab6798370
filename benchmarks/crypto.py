"""The encryption engine against phe and against the arithmetic floor, in one run.

``python -m benchmarks crypto --key-bits 2048 [--scheme paillier|ou] [--n 150000] [--workers W]``

With ``--scheme ou`` Okamoto-Uchiyama is measured next to Paillier at the same modulus size,
repeat by repeat in the same run, and the JSON line gets an ``"ou"`` object with the same
fields plus the ratios. Measured side by side, each as the median of interleaved repeats (the
machine is shared):

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
from contextlib import ExitStack
from typing import Any

import numpy as np
from gmpy2 import mpz  # type: ignore[import-untyped]

from benchmarks._common import emit_json, print_table
from p2pboost.codec import encode
from p2pboost.crypto import kernels
from p2pboost.crypto.additive import CiphertextBatch, window_products
from p2pboost.crypto.engine import CryptoEngine, default_workers
from p2pboost.crypto.histogram import build_histogram
from p2pboost.crypto.keys import SCHEMES, AnyPublicKey, make_keypair, make_table
from p2pboost.crypto.packing import PackingSpec
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


def _product_us(mod: Any, w: int, windows: int, count: int, repeats: int) -> float:
    """Microseconds per table product of the fixed-base kernel (:func:`window_products`) for
    ``windows`` rows of ``2**w`` random residues modulo ``mod`` (the least of ``repeats``)."""
    rng = np.random.default_rng(2)
    size = max(8, (int(mod).bit_length() + 7) // 8)
    rows = [
        [mpz.from_bytes(rng.bytes(size), "big") % mod for _ in range(1 << w)]
        for _ in range(windows)
    ]
    cols = [list(rng.integers(0, 1 << w, count).tolist()) for _ in range(windows)]
    best = min(_timed(lambda: window_products(rows, mod, cols)) for _ in range(repeats))
    return 1e6 * best / (windows * count)


def _anatomy(
    scheme: str, keys: tuple[Any, Any], packed_bits: int, repeats: int
) -> dict[str, float]:
    """One encryption by the key owner, taken apart (one core): its table products per CRT
    modulus, the measured cost of a product from Python, the interpreter's share of it (the same
    kernel on 61-bit numbers) and so the arithmetic a native kernel would still have to do."""
    public_key, private_key = keys
    table = make_table(public_key, private_key)
    w = table.window_bits
    r_windows = table.windows
    if scheme == "ou":
        moduli = [private_key.psquare, private_key.q]
        windows = r_windows + -(-packed_bits // w)  # h**r, then g**m for a packed row
    else:
        moduli = [private_key.psquare, private_key.qsquare]
        windows = r_windows
    count = 1000
    plain = [int(v) for v in np.random.default_rng(3).integers(0, 2**62, count)]
    plain = [v << (packed_bits - 62) | v for v in plain]
    enc_us = 1e6 * min(_timed(lambda: table.encrypt_many(plain)) for _ in range(repeats)) / count
    interp = _product_us(mpz((1 << 61) - 1), w, windows, count, repeats)
    per_mod = [_product_us(mod, w, windows, count, repeats) for mod in moduli]
    arith = sum(windows * max(0.0, t - interp) for t in per_mod)
    return {
        "products": float(windows * len(moduli)),
        "encrypt_us": enc_us,
        "product_us": sum(per_mod) / len(per_mod),
        "interpreter_us": interp,
        "python_products_us": sum(windows * t for t in per_mod),
        "native_estimate_us": arith,
    }


def _histogram_rates(
    public_key: AnyPublicKey, ciphertexts: list[Any], n_add: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Additions per second inside :func:`build_histogram` and in a bare product loop, one
    process, over the same ciphertexts."""
    rng = np.random.default_rng(1)
    n_rows = max(n_add // 4, 1)
    rows_ct = [ciphertexts[i % len(ciphertexts)] for i in range(n_rows)]
    bins = rng.integers(0, 32, (n_rows, 4)).astype(np.uint8)
    mod = public_key.modulus
    additions = 4 * n_rows - 4 * 32  # the first row of a cell costs no product
    add_rates, floor_rates = [], []

    def floor_loop() -> None:
        for _ in range(4):
            acc = rows_ct[0]
            for c in rows_ct:
                acc = acc * c % mod

    for _ in range(repeats):
        t = _timed(lambda: build_histogram(public_key, bins, 32, [rows_ct]))
        add_rates.append(_rate(additions, t))
        floor_rates.append(_rate(4 * n_rows, _timed(floor_loop)))
    return add_rates, floor_rates


def _kernel_figures(
    schemes: list[str], keys: dict[str, tuple[Any, Any]], packed_bits: int, repeats: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Per kernel (native, when built, and gmpy2), per scheme, one core: the key owner's
    encryption of a packed row, one ciphertext addition inside a histogram build, and one
    decryption, in microseconds (medians of ``repeats`` interleaved rounds: kernel after
    kernel in each round). For OU, gmpy2 also times decryption with the exponent ``p - 1``
    (the key structure before the fast-decryption one): ``decrypt_us_p_minus_1``."""
    import gmpy2

    from p2pboost.crypto.encryptors import make_encryptor

    names = [k for k in kernels.KERNELS if k == "gmpy2" or kernels.native_available()]
    rng = np.random.default_rng(4)
    n_enc, n_dec, n_rows = 400, 60, 2000
    plain = [int(v) << (packed_bits - 62) | int(v) for v in rng.integers(0, 2**62, n_enc)]
    bins = rng.integers(0, 32, (n_rows, 4)).astype(np.uint8)
    previous = kernels.active()
    times: dict[tuple[str, str, str], list[float]] = {}
    try:
        encryptors = {}
        for name in names:
            kernels.use(name)
            for s in schemes:
                encryptors[name, s] = make_encryptor(*keys[s])
        data = {s: encryptors["gmpy2", s].encrypt(plain) for s in schemes}
        for _ in range(repeats):
            for name in names:
                kernels.use(name)
                for s in schemes:
                    pk, sk = keys[s]
                    enc = encryptors[name, s]
                    t = _timed(lambda: enc.encrypt(plain))  # noqa: B023 - called at once
                    times.setdefault((name, s, "encrypt_us"), []).append(1e6 * t / n_enc)
                    cts = CiphertextBatch.of(pk, data[s]).residues(pk)
                    rows_ct = kernels.prefer(cts.take(np.arange(n_rows, dtype=np.int64) % len(cts)))
                    additions = 4 * n_rows - 4 * 32
                    t = _timed(lambda: build_histogram(pk, bins, 32, [rows_ct]))  # noqa: B023
                    times.setdefault((name, s, "add_us"), []).append(1e6 * t / additions)
                    few = kernels.prefer(cts.take(np.arange(n_dec, dtype=np.int64)))
                    t = _timed(lambda: kernels.decrypt(sk, few))  # noqa: B023
                    times.setdefault((name, s, "decrypt_us"), []).append(1e6 * t / n_dec)
                    if name == "gmpy2" and s == "ou":
                        p, p2 = sk.p, sk.psquare
                        e = p - 1
                        inv = gmpy2.invert((gmpy2.powmod(pk.g, e, p2) - 1) // p % p, p)
                        vals = few.values

                        def legacy() -> None:
                            for c in vals:  # noqa: B023
                                (gmpy2.powmod(c, e, p2) - 1) // p * inv % p  # noqa: B023

                        t = _timed(legacy)
                        key = (name, s, "decrypt_us_p_minus_1")
                        times.setdefault(key, []).append(1e6 * t / n_dec)
        assert kernels.decrypt(keys[schemes[-1]][1], few)[:3] == plain[:3]
    finally:
        kernels.use(previous)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (name, s, what), values in times.items():
        out.setdefault(name, {}).setdefault(s, {})[what] = round(statistics.median(values), 2)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks crypto", description=__doc__)
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument(
        "--scheme", default="paillier", choices=SCHEMES, help="ou: measure OU next to Paillier"
    )
    parser.add_argument("--n", type=int, default=150_000, help="rows, for the packing capacity")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    bits, workers, repeats = args.key_bits, args.workers, args.repeats
    schemes = ["paillier"] if args.scheme == "paillier" else ["paillier", args.scheme]
    scale = (2048 / bits) ** 2  # cost of a product grows about quadratically with the key
    n_enc = int(2500 * workers * scale)
    n_phe = max(8 * workers, n_enc // 25)
    n_dec = max(64, n_enc // 8)
    n_add = int(60_000 * scale)

    keygen_s: dict[str, float] = {}
    keys = {}
    for scheme in schemes:
        t0 = time.perf_counter()
        keys[scheme] = make_keypair(scheme, bits, allow_insecure=bits < 2048)
        keygen_s[scheme] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    packed = [int(v) for v in rng.integers(0, 2**62, n_enc)]  # packed g/h: about 105 bits
    packed = [v << 43 | v for v in packed]

    context = multiprocessing.get_context("spawn")
    enc_rates: dict[str, list[float]] = {s: [] for s in schemes}
    dec_rates: dict[str, list[float]] = {s: [] for s in schemes}
    ahead: dict[str, tuple[float, float]] = {}
    setup_s: dict[str, float] = {}
    ciphertexts: dict[str, list[Any]] = {s: [] for s in schemes}
    phe_rates: list[float] = []
    with ExitStack() as stack:
        engines = {s: stack.enter_context(CryptoEngine(*keys[s], workers=workers)) for s in schemes}
        phe_pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=context))
        for s, engine in engines.items():
            t0 = time.perf_counter()
            engine.encrypt_batch_blocking(packed[: 64 * workers])  # start workers, build tables
            setup_s[s] = time.perf_counter() - t0
        n_int = int(keys["paillier"][0].n)
        list(phe_pool.map(_phe_encrypt, [n_int] * workers, [[1]] * workers))
        chunk = max(1, n_phe // (4 * workers))
        phe_chunks = [packed[i : i + chunk] for i in range(0, n_phe, chunk)]
        for _ in range(repeats):
            for s, engine in engines.items():
                cts = ciphertexts[s]
                t0 = time.perf_counter()
                cts[:] = engine.encrypt_batch_blocking(packed)
                enc_rates[s].append(_rate(n_enc, time.perf_counter() - t0))
                t0 = time.perf_counter()
                engine.decrypt_batch_blocking(cts[:n_dec])
                t = time.perf_counter() - t0
                dec_rates[s].append(_rate(n_dec, t))
            t = _timed(
                lambda: list(phe_pool.map(_phe_encrypt, [n_int] * len(phe_chunks), phe_chunks))
            )
            phe_rates.append(_rate(n_phe, t))
        for s, engine in engines.items():
            assert engine.decrypt_batch_blocking(ciphertexts[s][:100]) == packed[:100]
            # Randomisers made ahead of time (while the guest would wait), then used.
            t0 = time.perf_counter()
            engine.precompute_blocking(n_enc)
            precompute_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            engine.encrypt_batch_blocking(packed)
            stashed_s = time.perf_counter() - t0
            ahead[s] = (_rate(n_enc, precompute_s), _rate(n_enc, stashed_s))

    add_rates = {s: _histogram_rates(keys[s][0], ciphertexts[s], n_add, repeats) for s in schemes}
    g = rng.uniform(-1, 1, args.n)
    h = rng.uniform(0, 0.25, args.n)
    med = statistics.median
    per_scheme: dict[str, dict[str, Any]] = {}
    anatomies: dict[str, dict[str, float]] = {}
    specs = {}
    for s in schemes:
        pk = keys[s][0]
        specs[s] = spec = PackingSpec.for_grids(
            args.n,
            choose_grid(g, args.n),
            choose_grid(h, args.n),
            plaintext_bits=pk.plaintext_bits,
        )
        wire = [ciphertexts[s][i % len(ciphertexts[s])] for i in range(10_000)]
        wire_bytes = len(encode(CiphertextBatch.from_ciphertexts(pk, wire))) / 10_000
        anatomy = _anatomy(s, keys[s], spec.row_bits[0], repeats)
        anatomies[s] = anatomy
        per_scheme[s] = {
            "encrypt_us_1core": round(anatomy["encrypt_us"], 2),
            "encrypt_native_estimate_us": round(anatomy["native_estimate_us"], 2),
            "encrypt_per_s": round(med(enc_rates[s]), 1),
            "add_per_s": round(med(add_rates[s][0]), 1),
            "floor_add_per_s": round(med(add_rates[s][1]), 1),
            "decrypt_per_s": round(med(dec_rates[s]), 1),
            "splitinfos_per_decrypt": spec.split_infos_per_plaintext,
            "bytes_per_ciphertext": round(wire_bytes, 3),
        }
    kernel_times = _kernel_figures(schemes, keys, specs[schemes[-1]].row_bits[0], repeats)
    paillier = per_scheme["paillier"]
    result: dict[str, Any] = {
        "benchmark": "crypto",
        "key_bits": bits,
        **{k: v for k, v in paillier.items() if k != "bytes_per_ciphertext"},
        "phe_encrypt_per_s": round(med(phe_rates), 1),
        "bytes_per_ciphertext": paillier["bytes_per_ciphertext"],
    }
    if len(schemes) == 2:
        other = per_scheme[schemes[1]]
        result[schemes[1]] = other
        result[f"{schemes[1]}_over_paillier"] = {
            "encrypt": round(other["encrypt_per_s"] / paillier["encrypt_per_s"], 3),
            "add": round(other["add_per_s"] / paillier["add_per_s"], 3),
            "decrypt": round(other["decrypt_per_s"] / paillier["decrypt_per_s"], 3),
            "split_infos_decrypted": round(
                other["decrypt_per_s"]
                * other["splitinfos_per_decrypt"]
                / (paillier["decrypt_per_s"] * paillier["splitinfos_per_decrypt"]),
                3,
            ),
        }
    # which Montgomery product the native kernel ran on (AVX-512 IFMA or GMP's mpn layer)
    result["kernels"] = {**kernel_times, "product": kernels.native_product()}
    if "native" in kernel_times:
        ratios: dict[str, dict[str, float]] = {}
        for s in schemes:
            nat, ref = kernel_times["native"][s], kernel_times["gmpy2"][s]
            ratios[s] = {
                k: round(nat[k] / ref[k], 3) for k in ("encrypt_us", "add_us", "decrypt_us")
            }
            if "decrypt_us_p_minus_1" in ref:
                ratios[s]["decrypt_vs_p_minus_1"] = round(
                    nat["decrypt_us"] / ref["decrypt_us_p_minus_1"], 3
                )
        result["native_over_gmpy2"] = ratios
    # Cost model per tree (DESIGN.md section 2) with these rates: 10 host features, 32 bins,
    # depth 5 (15 split nodes).
    m, b, depth, nodes = 10, 32, 5, 15
    rows: list[tuple[str, Any]] = [
        ("key bits / workers", f"{bits} / {workers}"),
        ("encrypt/s phe (Paillier), same pool size", result["phe_encrypt_per_s"]),
        ("samples enc / phe / dec", f"{n_enc} / {n_phe} / {n_dec}"),
    ]
    for s in schemes:
        r, c = per_scheme[s], specs[s].split_infos_per_plaintext
        a = anatomies[s]
        rows += [
            (f"[{s}] key generation (s)", keygen_s[s]),
            (f"[{s}] one encryption, 1 core (us)", a["encrypt_us"]),
            (f"[{s}]   table products (windows x CRT moduli)", a["products"]),
            (f"[{s}]   us per product from Python (mean of moduli)", a["product_us"]),
            (f"[{s}]   of which interpreter (same kernel, 61-bit)", a["interpreter_us"]),
            (f"[{s}]   products from Python (us)", a["python_products_us"]),
            (f"[{s}]   arithmetic only: native-kernel estimate (us)", a["native_estimate_us"]),
            (f"[{s}] engine start + tables (s)", setup_s[s]),
            (f"[{s}] encrypt/s (median)", r["encrypt_per_s"]),
            (f"[{s}]   randomisers made ahead/s", ahead[s][0]),
            (f"[{s}]   encrypt/s with them (critical path)", ahead[s][1]),
            (f"[{s}] additions/s in histograms (1 core)", r["add_per_s"]),
            (f"[{s}] additions/s bare loop floor (1 core)", r["floor_add_per_s"]),
            (f"[{s}] decrypt/s", r["decrypt_per_s"]),
            (f"[{s}] split-infos per decryption, n={args.n} (grid)", c),
            (f"[{s}] packed row bits (grid)", specs[s].row_bits[0]),
            (f"[{s}] wire bytes per ciphertext", r["bytes_per_ciphertext"]),
            (f"[{s}] model: encrypt {args.n} rows (s)", args.n / r["encrypt_per_s"]),
            (
                f"[{s}] model: additions, m={m}, depth={depth} (s, 1 core)",
                args.n * m * (1 + (depth - 1) / 2) / r["add_per_s"],
            ),
            (
                f"[{s}] model: decryptions, {nodes} nodes x {m} x {b} bins (s)",
                nodes * m * b / c / r["decrypt_per_s"],
            ),
        ]
    for name, per in kernel_times.items():
        for s, figures in per.items():
            rows += [(f"[{s}] {name} kernel, 1 core: {k}", v) for k, v in figures.items()]
    print_table(rows, f"crypto benchmark ({os.cpu_count()} cpus)")
    emit_json(result)
    return 0
