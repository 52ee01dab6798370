"""``credit``: what a credit-risk review needs, measured on a bank (guest) and a telco (host).

``python -m benchmarks credit [--dataset give_credit30k] [--sections monotone,shap,iv,psi]
[--trees 5 --depth 4 --bins 32 --key-bits 1024 --test-size 0.3333 --seed 0 --reasons 3
--data-dir DIR]``

The bank holds ``NAME_hetero_guest.csv`` (the label and its features), the telco
``NAME_hetero_host.csv``; a seeded split keeps ``--test-size`` of the rows apart. Both parties
are ``p2pboost`` commands in processes of their own over loopback mutual TLS
(:mod:`benchmarks._credit_parties`), run as the credit-scoring how-to runs them. Sections:

* ``monotone``: from :mod:`benchmarks._credit_monotone` (``monotone_section``), imported only
  when asked for;
* ``shap``: ``p2pboost predict --contributions`` twice on the held-out rows, the telco as one
  player (grouped) and then consenting (per-feature tokens, mapped back with its own
  ``feature_tokens.csv``). ``max_abs_additivity_error``: contributions plus base value against
  the federated margin; ``max_abs_diff_vs_core``: both variants against the core's TreeSHAP
  (:func:`p2pboost.gbdt.shap.booster_contributions`) on the joined model, grouped with the
  telco's features as one player and per feature; ``max_abs_diff_core_vs_xgboost`` (and
  ``max_rel_diff_core_vs_xgboost``, relative to the largest contribution): the core's
  per-feature values against XGBoost's ``pred_contribs`` on the exported model (XGBoost
  computes in float32, so this one is about 1e-7 relative, not 1e-9); ``rows_per_s``: the
  guest's TreeSHAP computation alone, per-feature, in this process (best of 3);
* ``iv``: ``p2pboost binning`` (one encrypted pass) against a plaintext WOE/IV
  (:mod:`p2pboost.gbdt.woe`) of the joined training rows in the same bins: ``counts_equal``
  (every bin's event and non-event counts), ``max_abs_diff_vs_plaintext`` (every WOE and IV),
  ``s`` (the bank's protocol time);
* ``psi``: ``p2pboost stability`` on each side, the held-out rows against the training rows
  (features, and the scores from ``predict``) and against a copy of the held-out rows with the
  first feature of each party moved by one training standard deviation: ``score_psi``,
  ``max_abs_diff_vs_plaintext`` (every feature's and the score's PSI against a plaintext
  computation on the joined data, the scores the core's), ``shifted_psi`` and
  ``shifted_flagged`` (every shifted feature's PSI > 0.25), ``unshifted_max`` (the largest PSI
  of the independent held-out rows; below 0.1 expected).
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table, read_csv
from benchmarks._credit_parties import BANK, TELCO, CreditFederation, write_party_csv
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.export import to_xgboost
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.shap import booster_contributions
from p2pboost.gbdt.stability import feature_counts, psi, score_counts, score_edges
from p2pboost.gbdt.woe import bin_counts, woe_table
from p2pboost.hetero.inference.explain import guest_contributions
from p2pboost.hetero.inference.forest import HostSplits, host_bits
from p2pboost.hetero.model import GuestModel, HostModel, merged_model

DATASETS = ("give_credit30k", "default_credit", "breast")
SECTIONS = ("monotone", "shap", "iv", "psi")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


class _Data:
    """The split, each party's columns, written as each party's CSVs."""

    def __init__(self, directory: Path, dataset: str, test_size: float, seed: int) -> None:
        g_names, guest = read_csv(directory / f"{dataset}_hetero_guest.csv")
        h_names, host = read_csv(directory / f"{dataset}_hetero_host.csv")
        position = {int(i): k for k, i in enumerate(host[:, 0].tolist())}
        try:  # the host's rows in the guest's order, joined by id
            host = host[[position[int(i)] for i in guest[:, 0].tolist()]]
        except KeyError:
            raise SystemExit("the host file must hold every id of the guest file") from None
        order = np.random.default_rng(seed).permutation(guest.shape[0])
        n_test = round(guest.shape[0] * test_size)
        self.test, self.train = np.sort(order[:n_test]), np.sort(order[n_test:])
        self.ids = guest[:, 0].astype(np.int64)
        self.y = guest[:, g_names.index("y")]
        g_cols = [k for k, n in enumerate(g_names) if n not in ("id", "y")]
        self.guest_names = [g_names[k] for k in g_cols]
        self.host_names = h_names[1:]
        self.Xg, self.Xh = guest[:, g_cols], host[:, 1:]

    def joined(self, rows: np.ndarray) -> np.ndarray:
        return np.hstack([self.Xg[rows], self.Xh[rows]])

    def write(self, fed: CreditFederation) -> None:
        d = fed.directory
        tr, te = self.train, self.test
        write_party_csv(d / "bank.csv", self.ids[tr], self.Xg[tr], self.guest_names, self.y[tr])
        write_party_csv(d / "telco.csv", self.ids[tr], self.Xh[tr], self.host_names)
        write_party_csv(
            d / "bank_test.csv", self.ids[te], self.Xg[te], self.guest_names, self.y[te]
        )
        write_party_csv(d / "telco_test.csv", self.ids[te], self.Xh[te], self.host_names)
        for name, X, names, train_X in (
            ("bank_shift.csv", self.Xg[te], self.guest_names, self.Xg[tr]),
            ("telco_shift.csv", self.Xh[te], self.host_names, self.Xh[tr]),
        ):
            moved = X.copy()
            moved[:, 0] += train_X[:, 0].std()
            y = self.y[te] if name.startswith("bank") else None
            write_party_csv(d / name, self.ids[te], moved, names, y)


def _models(fed: CreditFederation) -> tuple[GuestModel, HostModel]:
    return GuestModel.load(fed.out(BANK, "model.json")), HostModel.load(
        fed.out(TELCO, "model.json")
    )


def _explanations(path: Path) -> tuple[list[str], np.ndarray]:
    rows = _rows(path)
    names = list(rows[0])
    players = names[1 : names.index("base_value") + 1]
    return players, np.array([[float(r[p]) for p in players] for r in rows])


def shap_section(fed: CreditFederation, data: _Data, reasons: int) -> dict[str, Any]:
    bank, telco = ["predict", "--config", "bank.toml"], ["predict", "--config", "telco.toml"]
    common = {"path": "bank_test.csv", "output": "test_scores.csv"}
    fed.set_predict(BANK, **common, explanations="grouped.csv")
    summary, grouped_s = fed.step([*bank, "--contributions", "--reasons", str(reasons)], telco)
    fed.set_predict(TELCO, path="telco_test.csv", explain_features=True)
    fed.set_predict(BANK, **common, explanations="consented.csv")
    _, consented_s = fed.step([*bank, "--contributions", "--reasons", str(reasons)], telco)
    guest, host = _models(fed)
    te = data.test
    margin = guest.predict_margin(data.Xg[te], [host.decisions(data.Xh[te])])[:, 0]
    merged = merged_model(guest, [host])
    X = data.joined(te)
    n_g, n_h = len(data.guest_names), len(data.host_names)
    grouped_core = booster_contributions(merged, X, groups=np.r_[np.arange(n_g), [n_g] * n_h])
    per_feature_core = booster_contributions(merged, X)
    g_players, grouped = _explanations(fed.out(BANK, "grouped.csv"))
    c_players, consented = _explanations(fed.out(BANK, "consented.csv"))
    tokens = {r["column"]: r["feature"] for r in _rows(fed.out(TELCO, "feature_tokens.csv"))}
    assert g_players == [*data.guest_names, TELCO, "base_value"], g_players
    columns = [
        n_g + data.host_names.index(tokens[p]) if p in tokens else c_players.index(p)
        for p in c_players
    ]
    columns[-1] = n_g + n_h  # base_value
    unused = sorted(set(range(n_g, n_g + n_h)) - set(columns))
    diff_vs_core = max(
        float(np.abs(grouped - grouped_core).max()),
        float(np.abs(consented - per_feature_core[:, columns]).max()),
        float(np.abs(per_feature_core[:, unused]).max()) if unused else 0.0,
    )
    additivity = max(
        float(np.abs(grouped.sum(axis=1) - margin).max()),
        float(np.abs(consented.sum(axis=1) - margin).max()),
    )
    xgb_diff, xgb_rel = _vs_xgboost(merged, X, per_feature_core)
    splits = HostSplits.of(host)
    bits = host_bits(splits, data.Xh[te])
    best = float("inf")
    for _ in range(3):  # per feature: the feature index serves as the token
        t0 = time.perf_counter()
        guest_contributions(guest, data.Xg[te], [bits], [splits.feature])
        best = min(best, time.perf_counter() - t0)
    return {
        "rows": int(te.size),
        "test_auc": summary.get("auc"),
        "players_grouped": len(g_players) - 1,
        "players_consented": len(c_players) - 1,
        "max_abs_additivity_error": additivity,
        "max_abs_diff_vs_core": diff_vs_core,
        "max_abs_diff_core_vs_xgboost": xgb_diff,
        "max_rel_diff_core_vs_xgboost": xgb_rel,
        "rows_per_s": round(te.size / best, 1),
        "cli_predict_s": {"grouped": round(grouped_s, 3), "consented": round(consented_s, 3)},
    }


def _vs_xgboost(merged: Any, X: np.ndarray, core: np.ndarray) -> tuple[float, float]:
    import xgboost as xgb

    booster = xgb.Booster()
    booster.load_model(bytearray(json.dumps(to_xgboost(merged, with_statistics=True)).encode()))
    theirs = np.asarray(booster.predict(xgb.DMatrix(X), pred_contribs=True), dtype=np.float64)
    diff = float(np.abs(theirs - core).max())
    return diff, diff / float(np.abs(core).max())


def iv_section(fed: CreditFederation, data: _Data, bins: int) -> dict[str, Any]:
    summary, _ = fed.step(
        ["binning", "--config", "bank.toml"], ["binning", "--config", "telco.toml"]
    )
    table = _rows(fed.out(BANK, "binning.csv"))
    ivs = [f["iv"] for f in json.loads(fed.out(BANK, "binning.json").read_text())["features"]]
    tr = data.train
    X = data.joined(tr)
    mapper = BinMapper(bins).fit(X)
    events, non_events = bin_counts(mapper.transform(X).codes, data.y[tr], mapper.n_slots)
    plain = woe_table(mapper, events, non_events)
    by_feature: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in table:
        by_feature.setdefault((row["party"], row["feature"]), []).append(row)
    feats = list(by_feature.values())
    counts_equal = len(feats) == len(plain)
    diff = 0.0
    for rows, bins_f, iv in zip(feats, plain, ivs, strict=True):
        e = np.array([int(r["events"]) for r in rows])
        ne = np.array([int(r["non_events"]) for r in rows])
        counts_equal &= np.array_equal(e, bins_f.events) and np.array_equal(ne, bins_f.non_events)
        woe = np.array([float(r["woe"]) for r in rows])
        diff = max(diff, float(np.abs(woe - bins_f.woe).max()), abs(float(iv) - bins_f.iv))
    return {
        "features": len(plain),
        "counts_equal": bool(counts_equal),
        "max_abs_diff_vs_plaintext": diff,
        "s": summary.get("s"),
    }


def psi_section(fed: CreditFederation, data: _Data, bins: int) -> dict[str, Any]:
    bank, telco = ["predict", "--config", "bank.toml"], ["predict", "--config", "telco.toml"]
    fed.set_predict(TELCO, path="telco.csv")
    fed.set_predict(BANK, path="bank.csv", output="train_scores.csv")
    fed.step(bank, telco)
    fed.set_predict(TELCO, path="telco_test.csv")
    fed.set_predict(BANK, path="bank_test.csv", output="test_scores.csv")
    fed.step(bank, telco)
    t0 = time.perf_counter()
    scores = ["--train-scores", "out-bank/train_scores.csv", "--scores", "out-bank/test_scores.csv"]
    runs: dict[str, dict[str, Any]] = {}
    for party, batch, extra in (
        (BANK, "bank_test.csv", scores),
        (TELCO, "telco_test.csv", []),
        (BANK, "bank_shift.csv", []),
        (TELCO, "telco_shift.csv", []),
    ):
        out = f"out-{party}/psi_{batch.removesuffix('.csv')}.json"
        fed.step(["stability", "--config", f"{party}.toml", "--batch", batch, "--out", out, *extra])
        runs[batch] = json.loads((fed.directory / out).read_text())
    seconds = time.perf_counter() - t0
    tr, te = data.train, data.test
    # The bank bins as training did; the telco's file keeps thresholds, not bins, so its
    # stability fits bins again with its own max_bin (a host's file cannot set it: the default).
    plain = np.concatenate(
        [
            psi(feature_counts(m, X[tr]), feature_counts(m, X[te]))
            for m, X in (
                (BinMapper(bins).fit(data.Xg[tr]), data.Xg),
                (BinMapper(BoostParams().max_bin).fit(data.Xh[tr]), data.Xh),
            )
        ]
    )
    ours = [
        f["psi"] for f in runs["bank_test.csv"]["features"] + runs["telco_test.csv"]["features"]
    ]
    guest, host = _models(fed)
    merged = merged_model(guest, [host])
    before, after = merged.predict(data.joined(tr)), merged.predict(data.joined(te))
    edges = score_edges(before)
    plain_score = float(psi(score_counts(before, edges), score_counts(after, edges)))
    score = runs["bank_test.csv"]["score"]["psi"]
    shifted = {
        f"{party}:{run['features'][0]['feature']}": run["features"][0]["psi"]
        for party, run in ((BANK, runs["bank_shift.csv"]), (TELCO, runs["telco_shift.csv"]))
    }
    return {
        "score_psi": score,
        "feature_psi": dict(
            zip([*data.guest_names, *(f"{TELCO}:{n}" for n in data.host_names)], ours, strict=True)
        ),
        "max_abs_diff_vs_plaintext": max(
            float(np.abs(np.array(ours) - plain).max()), abs(score - plain_score)
        ),
        "shifted_psi": shifted,
        "shifted_flagged": all(v > 0.25 for v in shifted.values()),
        "unshifted_max": max([*ours, score]),
        "s": round(seconds, 3),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks credit", description=__doc__)
    parser.add_argument("--dataset", default="give_credit30k", choices=DATASETS)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048])
    parser.add_argument("--test-size", type=float, default=1 / 3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reasons", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    directory = data_dir(args.data_dir)
    result: dict[str, Any] = {"benchmark": "credit", "dataset": args.dataset}
    if "monotone" in sections:
        module: Any = importlib.import_module("benchmarks._credit_monotone")
        result["monotone"] = module.monotone_section(
            directory, key_bits=args.key_bits, trees=args.trees, depth=args.depth
        )
    data = _Data(directory, args.dataset, args.test_size, args.seed)
    with tempfile.TemporaryDirectory(prefix="p2pboost-credit-") as tmp:
        fed = CreditFederation(Path(tmp), args.trees, args.depth, args.bins, args.key_bits)
        data.write(fed)
        if "iv" in sections:
            result["iv"] = iv_section(fed, data, args.bins)
        if "shap" in sections or "psi" in sections:
            summary, seconds = fed.step(
                ["party", "--config", "bank.toml", "--task", "train"],
                ["party", "--config", "telco.toml", "--task", "train"],
            )
            result["train"] = {
                "s": round(seconds, 3),
                "s_per_tree": summary.get("s_per_tree"),
                "trees": summary.get("trees"),
            }
        if "shap" in sections:
            result["shap"] = shap_section(fed, data, args.reasons)
        if "psi" in sections:
            result["psi"] = psi_section(fed, data, args.bins)
    rows = [
        (f"{section}.{key}", value)
        for section in ("monotone", "train", "shap", "iv", "psi")
        for key, value in result.get(section, {}).items()
        if not isinstance(value, dict)
    ]
    print_table(rows, f"credit on {args.dataset} ({len(data.train)} training rows)")
    emit_json(result)
    return 0
