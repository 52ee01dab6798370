"""What an honest-but-curious partner infers from what it legitimately receives.

``python -m benchmarks attacks --dataset give_credit30k [--trees 10 --depth 4 --bins 32
--lr 0.3 --key-bits 1024 --scheme ou --shares 0.005,0.01,0.05 --host-depth 2 --per-party 1
--purity-bound 0.2 --rows N --workers W --seed 0 --data-dir DIR]``

The federations, views and attacks are the library's (:mod:`p2pboost.audit`, which ``p2pboost
audit`` runs on a federation's own files); this module picks the modes and prints the table.

Each training mode is a whole federation (a guest and one host, the data set's guest and host
columns) in this process over the testing kit's in-memory fabric, with every party's received
transport messages recorded and decoded as its node decodes them
(:mod:`p2pboost.audit.views`). The attacks then use only what the attacking party holds:

- **Label inference (the host).** From its received ``tree`` and ``layer`` messages the host
  rebuilds every row set it was shown (sampled rows, every node's rows); it knows the labels
  of a random ``share`` of the training rows and spreads them over those sets
  (:func:`p2pboost.audit.attacks.propagate_labels`, the instance-clustering / ID2Graph
  attack). ``attack_auc``: the AUC of its scores on the rows whose labels it did not know.
  ``test_auc``: the federated model's AUC on the held-out rows (the trade-off). The host's
  model file adds nothing here: its splits' row sets are among the sets it was sent.
- ``host_alone_auc``: what the host infers without the federation, from its own features and
  the same known labels: the better, on the unknown rows, of the core GBDT and a logistic
  regression trained on the known rows (a reference generous to the host, so the excess
  below is if anything understated).
- ``control_auc``: the attack on random row sets of the same sizes (each tree's sets with its
  rows renamed by a random permutation); about 0.5 when the attack reads only the sets.
- **Feature order (the guest).** During one-round inference of the standard model on the
  held-out rows the guest receives every host split's decision bit for every row. It groups
  the splits by nesting of their left sets and ranks rows by the largest group
  (:func:`p2pboost.audit.attacks.order_by_bits`); ``spearman`` is the rank correlation
  with the host feature the model splits on most (from the host's file, the ground truth).
  ``scores_only``: the best a guest that sees only each row's score can do (the absolute
  Spearman of the score itself: every monotone map of it ranks the same).

Modes: ``standard``; ``complete_secure_1``, ``complete_secure_3`` (first rounds on guest
features); ``mix`` (``tree_num_per_party``); ``layered`` (``host_depth`` host layers on top);
``dp_1``, ``dp_4`` (DPBoost at epsilon 1 and 4, one ensemble of all the trees). Candidate
defences measured from the settings that exist: ``layered_1`` (one host layer),
``complete_secure_half`` (the first half of the rounds guest-only),
``layered_1_complete_secure_3`` (both: three guest-only rounds, then one host layer per
tree). Label differential privacy
(``HeteroConfig.label_dp_epsilon``, :mod:`p2pboost.hetero.training.label_dp`: the guest's
Laplace noise on every round's gradients, the whole run epsilon-label-DP towards the hosts):
``label_dp_1``, ``label_dp_4``, ``label_dp_8`` (epsilon 1, 4 and 8 over the run's rounds) and
``label_dp_8_purity_gate`` (with the purity gate, which then reads the noisy gradients). It
replaces the benchmark-side randomised response of the labels (``label_rr_*``, removed:
it left the excess where it was, docs/explanation/defences.md). Last,
``hidden_guest_splits`` (marked ``"simulated": true``): the standard model attacked on the
view a host would keep if the guest's splits' row sets were hidden from it, i.e. only its own
splits' partitions of all rows, which its file and features give it (no mode does this yet:
no cost is measured).
The purity gate (:mod:`p2pboost.hetero.training.defences`, ``HeteroConfig.purity_bound``):
``purity_gate`` (guest-only rounds until the guest's tree's gradient purity is below
``--purity-bound``) and ``layered_1_purity_gate`` (the same, then one host layer per tree):
the recommended setting, whose figures the last line repeats as ``recommended`` with its
``setting`` (docs/explanation/defences.md).

Last line: ``{"benchmark": "attacks", "dataset", "label_inference": {MODE: {"known_share",
"attack_auc", "test_auc", "excess", "trees_seen", "by_share": {SHARE: {"attack_auc",
"excess"}}}, "recommended": {"known_share", "attack_auc", "test_auc", "excess", "mode",
"setting"}}, "host_alone_auc", "control_auc", "by_share": {SHARE: {"host_alone_auc",
"control_auc"}}, "feature_order": {"default": {"spearman", ...}, "scores_only":
{"spearman"}}, ...}`` and the settings; the top-level figures are at a known share of 1 %.
Every figure is indicative on a shared machine: one seed, one split of the known rows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks._common import data_dir, emit_json, print_table
from benchmarks.lossless import HeteroSplit, Task, load_hetero_split
from p2pboost import BoostParams, HeteroConfig
from p2pboost.audit.attacks import auc, random_like, spearman
from p2pboost.audit.suite import (
    Run,
    feature_order,
    federate,
    flat_groups,
    host_alone,
    known_rows,
    label_attack,
)

__all__ = ["MODES", "main", "run_mode"]

GUEST, HOST = "guest", "host1"
#: The share of known labels the headline figures use.
HEADLINE = 0.01


def _modes(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Mode name -> ``{"config": HeteroConfig settings, "params": BoostParams updates}``."""
    dp = {"trees_per_ensemble": args.trees}  # fresh noise: a seeded run needs dp_replay hosts
    half = max(1, args.trees // 2)
    return {
        "standard": {},
        "complete_secure_1": {"config": {"complete_secure": 1}},
        "complete_secure_3": {"config": {"complete_secure": 3}},
        "mix": {"config": {"tree_num_per_party": args.per_party}},
        "layered": {
            "config": {"host_depth": args.host_depth, "guest_depth": args.depth - args.host_depth}
        },
        "dp_1": {"params": {"dp": {"epsilon": 1.0, **dp}}},
        "dp_4": {"params": {"dp": {"epsilon": 4.0, **dp}}},
        "layered_1": {"config": {"host_depth": 1, "guest_depth": args.depth - 1}},
        "complete_secure_half": {"config": {"complete_secure": half}},
        "layered_1_complete_secure_3": {
            "config": {"host_depth": 1, "guest_depth": args.depth - 1, "complete_secure": 3}
        },
        "label_dp_1": {"config": {"label_dp_epsilon": 1.0}},
        "label_dp_4": {"config": {"label_dp_epsilon": 4.0}},
        "label_dp_8": {"config": {"label_dp_epsilon": 8.0}},
        "label_dp_8_purity_gate": {
            "config": {"label_dp_epsilon": 8.0, "purity_bound": args.purity_bound}
        },
        "purity_gate": {"config": {"purity_bound": args.purity_bound}},
        "layered_1_purity_gate": {
            "config": {
                "host_depth": 1,
                "guest_depth": args.depth - 1,
                "purity_bound": args.purity_bound,
            }
        },
    }


#: The mode the benchmark recommends (docs/explanation/defences.md), and its setting in words.
RECOMMENDED = "layered_1_purity_gate"


def recommended_setting(args: argparse.Namespace) -> str:
    """The recommended mode's training setting, as a user writes it."""
    return (
        f"HeteroConfig(host_depth=1, guest_depth={args.depth - 1}, "
        f"purity_bound={args.purity_bound:g})"
    )


MODES = (
    "standard",
    "complete_secure_1",
    "complete_secure_3",
    "mix",
    "layered",
    "dp_1",
    "dp_4",
    "layered_1",
    "complete_secure_half",
    "layered_1_complete_secure_3",
    "label_dp_1",
    "label_dp_4",
    "label_dp_8",
    "label_dp_8_purity_gate",
    "purity_gate",
    "layered_1_purity_gate",
)


def run_mode(
    split: HeteroSplit,
    params: BoostParams,
    settings: dict[str, Any],
    args: argparse.Namespace,
    private_rows: int = 0,
) -> Run:
    """Train one mode's federation (its settings from :func:`_modes`); ``private_rows``:
    test rows scored again by private inference (see :func:`~p2pboost.audit.suite.federate`)."""
    config = HeteroConfig(
        key_bits=args.key_bits,
        allow_insecure_key=args.key_bits < 2048,
        scheme=args.scheme,
        workers=args.workers,
        **settings.get("config", {}),
    )
    mode_params = params.with_updates(**settings["params"]) if "params" in settings else params
    return federate(
        split.guest_train,
        split.y_train,
        [split.host_train],
        split.guest_test,
        [split.host_test],
        mode_params,
        config,
        args.workers,
        private_rows=private_rows,
    )


#: Feature-order attacks on what the guest receives at inference: name -> attack. Private
#: inference adds its own entry here (the guest's view there holds the scores only).
FeatureAttack = Callable[[Run, np.ndarray], dict[str, Any]]


def _bits_attack(run: Run, feature: np.ndarray) -> dict[str, Any]:
    return feature_order(run.bits[0], feature)


def _scores_attack(run: Run, feature: np.ndarray) -> dict[str, Any]:
    return {"spearman": round(abs(spearman(run.proba, feature)), 4)}


def _private_attack(run: Run, feature: np.ndarray) -> dict[str, Any]:
    """The same guest after private inference of the first ``--private-rows`` test rows: the
    bits attack on whatever host splits its received messages hold (none, if private
    inference keeps its promise), else the best it can do with what it decrypted, the
    scores. ``scores_only_same_rows`` is the scores-only attack on those rows (the fair
    reference: the sample is smaller than the test set)."""
    if run.private_proba is None or run.private_bits is None:
        return {"spearman": None, "rows": 0}
    m = run.private_proba.size
    received = sum(int(b[0].size) for b in run.private_bits)
    if received:
        attack = feature_order(run.private_bits[0], feature[:m])
    else:
        attack = {"spearman": round(abs(spearman(run.private_proba, feature[:m])), 4)}
    return {
        **attack,
        "rows": m,
        "host_splits_received": received,
        "scores_only_same_rows": round(abs(spearman(run.proba[:m], feature[:m])), 4),
        "max_abs_score_diff": float(np.max(np.abs(run.private_proba - run.proba[:m]))),
    }


FEATURE_ATTACKS: dict[str, FeatureAttack] = {
    "default": _bits_attack,
    "private": _private_attack,
    "scores_only": _scores_attack,
}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks attacks", description=__doc__)
    ap.add_argument("--dataset", default="give_credit30k")
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--bins", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--key-bits", type=int, default=1024, choices=[1024, 2048, 3072])
    ap.add_argument("--scheme", default="ou", choices=["ou", "paillier"])
    ap.add_argument("--shares", default="0.005,0.01,0.05", help="known-label shares")
    ap.add_argument("--host-depth", type=int, default=2, help="layered mode's host layers")
    ap.add_argument("--per-party", type=int, default=1, help="mix mode's tree_num_per_party")
    ap.add_argument(
        "--purity-bound", type=float, default=0.2, help="the purity gate's bound (purity_gate)"
    )
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    ap.add_argument("--rows", type=int, default=None, help="use the first N training rows")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--private-rows",
        type=int,
        default=None,
        help="test rows scored again by private inference for feature_order.private "
        "(default: all of them; 0: skip)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    shares = sorted(float(s) for s in args.shares.split(","))
    if HEADLINE not in shares:
        shares = sorted([*shares, HEADLINE])
    modes = _modes(args)
    chosen = args.modes.split(",")
    if "standard" not in chosen or any(m not in modes for m in chosen):
        ap.error(f"--modes: a subset of {', '.join(MODES)} that holds standard")
    if not 0 < args.host_depth < args.depth and "layered" in chosen:
        ap.error("--host-depth must leave the guest at least one layer")
    if args.trees < 4 and any(m.endswith("complete_secure_3") for m in chosen):
        ap.error("--trees must be at least 4 (complete_secure_3 keeps a host tree)")
    if args.depth < 2 and any(m.startswith("layered_1") for m in chosen):
        ap.error("layered_1 needs --depth 2 or more")
    split = load_hetero_split(data_dir(args.data_dir), args.dataset)
    if split.task is not Task.BINARY:
        ap.error(f"{args.dataset} is not a binary task")
    if args.rows is not None:
        n = args.rows
        split = replace(
            split,
            guest_train=split.guest_train[:n],
            host_train=split.host_train[:n],
            y_train=split.y_train[:n],
        )
    params = BoostParams(
        n_estimators=args.trees,
        max_depth=args.depth,
        max_bin=args.bins,
        learning_rate=args.lr,
        seed=args.seed,
    ).validate()
    y = split.y_train.astype(np.int64)
    known = known_rows(y, shares, args.seed)
    alone = {s: host_alone(split.host_train, y, known[s], params) for s in shares}

    runs: dict[str, Run] = {}
    label: dict[str, Any] = {}

    def figures(groups: list[np.ndarray]) -> dict[str, Any]:
        by_share = {}
        for s in shares:
            found = label_attack(groups, y, known[s], split.host_train)
            a = max(found.values())
            by_share[str(s)] = {
                "attack_auc": round(a, 4),
                "excess": round(a - alone[s], 4),
                **{f"{k}_auc": round(v, 4) for k, v in found.items()},
            }
        return {
            "known_share": HEADLINE,
            "attack_auc": by_share[str(HEADLINE)]["attack_auc"],
            "excess": by_share[str(HEADLINE)]["excess"],
            "by_share": by_share,
        }

    for name in (m for m in MODES if m in chosen):
        run = runs[name] = run_mode(
            split,
            params,
            modes[name],
            args,
            private_rows=(
                0
                if name != "standard"
                else split.y_test.size
                if args.private_rows is None
                else args.private_rows
            ),
        )
        label[name] = {
            **figures(flat_groups(run.view)),
            "test_auc": round(auc(split.y_test, run.proba), 4),
            "trees_seen": run.view.informed,
            "seconds": round(run.seconds, 2),
        }
        print(f"  {name}: {label[name]}", flush=True)
    # A defence no mode offers yet, measured on the view it would leave the host: the guest's
    # splits' row sets hidden (the hosts would build histograms over encrypted gradients
    # zeroed outside each node), so the host holds only its own splits' partitions of all
    # rows, which its file and features give it.
    own = runs["standard"].host.decisions(split.host_train).go_left
    label["hidden_guest_splits"] = {
        **figures([g for row in own for g in (np.flatnonzero(row), np.flatnonzero(~row))]),
        "test_auc": label["standard"]["test_auc"],
        "simulated": True,
    }

    if RECOMMENDED in label:
        best = label[RECOMMENDED]
        label["recommended"] = {
            "known_share": HEADLINE,
            "attack_auc": best["attack_auc"],
            "test_auc": best["test_auc"],
            "excess": best["excess"],
            "mode": RECOMMENDED,
            "setting": recommended_setting(args),
        }
    standard = runs["standard"]
    control = {
        s: label_attack(
            random_like(standard.view.groups, y.size, args.seed + 1), y, known[s], None
        )["sets"]
        for s in shares
    }
    importance = standard.host.feature_importance()
    top = int(np.argmax(importance))
    feature = split.host_test[:, top]
    feature_order: dict[str, Any] = {
        name: attack(standard, feature) for name, attack in FEATURE_ATTACKS.items()
    }
    feature_order["host_feature"] = top
    feature_order["test_auc"] = label["standard"]["test_auc"]

    base_excess = label["standard"]["excess"]
    rows: list[tuple[str, Any]] = [
        ("rows (train / test)", f"{y.size} / {split.y_test.size}"),
        ("host_alone_auc @1%", round(alone[HEADLINE], 4)),
        ("control_auc @1%", round(control[HEADLINE], 4)),
    ]
    for name, r in label.items():
        ratio = r["excess"] / base_excess if base_excess > 0 else float("nan")
        seen = f"trees seen {r['trees_seen']}" if "trees_seen" in r else "(simulated view)"
        if "setting" in r:
            seen = r["setting"]
        rows.append(
            (
                name,
                f"attack {r['attack_auc']:.4f}  excess {r['excess']:+.4f} "
                f"({ratio:.2f} x standard)  test AUC {r['test_auc']:.4f}  {seen}",
            )
        )
    for name, r in feature_order.items():
        if isinstance(r, dict):
            rows.append((f"feature order: {name}", r))
    print_table(
        rows,
        f"attacks on {args.dataset} (known labels {HEADLINE:.0%}; excess = attack_auc - "
        "host_alone_auc)",
    )
    emit_json(
        {
            "benchmark": "attacks",
            "dataset": args.dataset,
            "label_inference": label,
            "host_alone_auc": round(alone[HEADLINE], 4),
            "control_auc": round(control[HEADLINE], 4),
            "by_share": {
                str(s): {
                    "host_alone_auc": round(alone[s], 4),
                    "control_auc": round(control[s], 4),
                }
                for s in shares
            },
            "feature_order": feature_order,
            "rows": int(y.size),
            "trees": args.trees,
            "depth": args.depth,
            "bins": args.bins,
            "learning_rate": args.lr,
            "key_bits": args.key_bits,
            "scheme": args.scheme,
            "seed": args.seed,
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
