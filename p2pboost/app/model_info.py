"""What a model file holds, and what it does not (``p2pboost inspect``).

A party about to hand a model file to a colleague, an auditor or a server wants to know what is
in it before it leaves the building: in hetero SecureBoost each party's file holds only its own
secrets, and this module says which ones, explicitly, next to the figures users look for
(trees, objective, importance of the party's own features, the evaluation during training).

:func:`describe` returns a JSON-ready dict (``p2pboost inspect --json``);
:func:`format_description` turns it into text for people. :func:`load_model` reads any of the
three file kinds; :mod:`p2pboost.app.report` draws its plots from the same functions.

Features are named as the model file names them (the CSV header or DataFrame columns it was
trained on); ``feature_names`` given here take precedence, and files without names show
``f0, f1, ...`` in the order of the party's own columns.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pboost.exceptions import InputError, ModelError
from p2pboost.gbdt import booster as gbdt_booster
from p2pboost.gbdt.booster import Booster
from p2pboost.gbdt.history import History, history_to_json
from p2pboost.gbdt.params import BoostParams
from p2pboost.gbdt.privacy import gain_sensitivity
from p2pboost.hetero.model import GUEST, GUEST_FORMAT, HOST_FORMAT, GuestModel, HostModel

__all__ = [
    "AnyModel",
    "Importance",
    "ModelKind",
    "describe",
    "feature_names_of",
    "format_description",
    "history_of",
    "importance_of",
    "kind_of",
    "load_model",
]

F64 = npt.NDArray[np.float64]
AnyModel = GuestModel | HostModel | Booster

#: Parameters always shown in the text form; the others only when not at their default.
_MAIN_PARAMS = ("objective", "n_estimators", "learning_rate", "max_depth", "max_bin")


class ModelKind(StrEnum):
    """The three kinds of model file."""

    HETERO_GUEST = "hetero-guest"
    HETERO_HOST = "hetero-host"
    BOOSTER = "booster"  # plaintext core or homo (every homo party holds the same model)


_TITLES = {
    ModelKind.HETERO_GUEST: "hetero SecureBoost model, guest's part",
    ModelKind.HETERO_HOST: "hetero SecureBoost model, a host's part",
    ModelKind.BOOSTER: "complete boosting model (plaintext training or homo federation)",
}

_HOLDS = {
    ModelKind.HETERO_GUEST: [
        "the structure of every tree and which party owns each split",
        "the leaf weights, the base margin and the objective",
        "the guest's own splits: feature, threshold, missing-value direction",
        "the split gains and node covers (sums of hessians)",
        "the bin edges of the guest's own features",
    ],
    ModelKind.HETERO_HOST: [
        "for each split this host owns: tree, node, feature, bin, threshold, missing direction",
    ],
    ModelKind.BOOSTER: [
        "every tree in full: features, thresholds, leaf weights, gains and covers",
        "the bin edges of every feature, the base margin and the objective",
    ],
}

_NOT_HELD = {
    ModelKind.HETERO_GUEST: [
        "any host's features, thresholds or bins (host splits are only an owner id)",
        "any training data, labels, gradients or ids",
        "the Paillier keys of the training",
    ],
    ModelKind.HETERO_HOST: [
        "leaf weights, labels, gradients, gains or the objective: it cannot predict alone",
        "the guest's or other hosts' splits, or how many trees there are",
        "any training data or ids",
    ],
    ModelKind.BOOSTER: [
        "training data, labels or ids (but thresholds reveal feature values near splits)",
    ],
}


@dataclass(frozen=True, slots=True)
class Importance:
    """This party's view of its own features: split counts, and gains when it knows them.

    A host never learns gains (they are computed from the guest's gradients), so ``gain`` is
    ``None`` for a host file.
    """

    split: F64
    gain: F64 | None


# -- reading ----------------------------------------------------------------------------------


def load_model(path: str | os.PathLike[str]) -> AnyModel:
    """Read a guest, host or booster file, whichever it is; :class:`ModelError` otherwise."""
    return _parse(_read_json(path), path)


def _parse(data: dict[str, Any], path: str | os.PathLike[str]) -> AnyModel:
    fmt = data.get("format")
    if fmt == GUEST_FORMAT:
        return GuestModel.from_dict(data)
    if fmt == HOST_FORMAT:
        return HostModel.from_dict(data)
    if fmt == gbdt_booster.FORMAT:
        return Booster.from_dict(data)
    if fmt == gbdt_booster.ESTIMATOR_FORMAT and isinstance(data.get("booster"), dict):
        return Booster.from_dict(data["booster"])  # an estimator's file: its booster
    raise ModelError(f"{os.fspath(path)} is not a p2pboost model file (format {fmt!r})")


def _read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    where = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"no such model file: {where}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read model file {where}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ModelError(f"{where} is not a p2pboost model file (not JSON)") from None
    if not isinstance(data, dict):
        raise ModelError(f"{where} is not a p2pboost model file (not a JSON object)")
    return data


def kind_of(model: AnyModel) -> ModelKind:
    if isinstance(model, GuestModel):
        return ModelKind.HETERO_GUEST
    if isinstance(model, HostModel):
        return ModelKind.HETERO_HOST
    return ModelKind.BOOSTER


def importance_of(model: AnyModel) -> Importance:
    """Split counts and (guest, booster) total gains of the party's own features.

    Over the trees predictions use (up to the best iteration), as the models' own
    ``feature_importance``; a host's file does not know the best iteration, so all its splits.
    """
    if isinstance(model, HostModel):
        return Importance(split=model.feature_importance(), gain=None)
    return Importance(split=model.feature_importance("split"), gain=model.feature_importance())


def history_of(model: AnyModel) -> History:
    """The evaluation history in the file (hosts never hold one: the guest evaluates)."""
    return {} if isinstance(model, HostModel) else model.history


# -- the description --------------------------------------------------------------------------


def describe(
    path: str | os.PathLike[str], *, feature_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """What the model file at ``path`` holds, as a JSON-ready dict (no NaN: ``None``).

    Keys: ``path``, ``kind``, ``title``, ``format``, ``version``, ``fingerprint``,
    ``parties``, ``objective``, ``params``, ``n_trees``, ``n_rounds``, ``trees_per_round``,
    ``best_iteration``, ``n_features``, ``features`` (name, splits, gain), ``splits``
    (per party), ``history``, ``diagnostics`` (the guest's: the leaf purity of the first tree
    and of the first the hosts saw), ``contribution`` (a vertical guest's: each party's
    ``gain_share`` and, when it had validation rows, the ``validation`` comparison with the
    guest-only model it trained in the same run; see :mod:`p2pboost.app._contribution`;
    None for other files), ``privacy`` (a private model's accountant record, else
    None), ``label_privacy`` (a vertical guest's label-DP accountant record, else None),
    ``holds``, ``does_not_hold``, ``warnings`` (what the file holds that it should not,
    e.g. a private model's un-noised count from an older release). Values a file cannot know
    are ``None``.
    """
    data = _read_json(path)
    model = _parse(data, path)
    kind = kind_of(model)
    names = feature_names_of(model, feature_names)
    out: dict[str, Any] = {
        "path": os.fspath(path),
        "kind": kind.value,
        "title": _TITLES[kind],
        "format": data["format"],
        "version": data["version"],
        **_header(model),
        **_shape(model),
        "n_features": len(names),
        "features": _features(importance_of(model), names),
        "splits": _splits(model),
        "history": history_to_json(history_of(model)),
        "diagnostics": dict(getattr(model, "diagnostics", {})),
        "contribution": _contribution(model),
        "privacy": getattr(model, "privacy", None),
        "label_privacy": getattr(model, "label_privacy", None),
        "holds": _holds(kind, getattr(model, "privacy", None) is not None),
        "does_not_hold": list(_NOT_HELD[kind]),
        "warnings": _unnoised_warnings(data),
    }
    return out


def _unnoised_warnings(data: Mapping[str, Any]) -> list[str]:
    """Private models of older releases stored the gradient filter's count in their privacy
    record. Loading drops it (the model object and any file saved from it are clean), so the
    record shown is the clean one; but this file still holds the count, which is what its
    owner must know before handing it on: say so, without repeating the value."""
    inner = data.get("booster") if data.get("format") == gbdt_booster.ESTIMATOR_FORMAT else data
    stored = inner.get("privacy") if isinstance(inner, Mapping) else None
    return [
        f"the privacy record holds {key!r}, a count of the training rows released without "
        "noise (outside the differential privacy guarantee; files of older releases): load "
        "and save the model again to drop it before sharing the file"
        for key in gbdt_booster.unnoised_counts(stored)
    ]


def _holds(kind: ModelKind, private: bool) -> list[str]:
    """What a file of ``kind`` holds; a private model keeps no gains or covers."""
    full = "every tree in full: features, thresholds, leaf weights, gains and covers"
    noisy = (
        "every tree: features, thresholds and noisy leaf weights (no gains, covers or internal "
        "values: differential privacy)"
    )
    return [noisy if private and h == full else h for h in _HOLDS[kind]]


def feature_names_of(model: AnyModel, given: Sequence[str] | None = None) -> list[str]:
    """``given`` checked against the model's own feature count, else the names the model
    file holds, else ``f0, f1, ...``."""
    n = model.n_features
    if given is None:
        stored = model.feature_names
        return list(stored) if stored is not None else [f"f{i}" for i in range(n)]
    if len(given) != n:
        raise InputError(f"{len(given)} feature names given, the model has {n} own features")
    return [str(name) for name in given]


def _header(model: AnyModel) -> dict[str, Any]:
    """Fingerprint, parties, objective and parameters (``None`` where the file has none)."""
    if isinstance(model, HostModel):
        parties = {"guest": model.guest}
        return {
            "fingerprint": model.fingerprint,
            "parties": parties,
            "objective": None,
            "params": None,
        }
    params = model.params.to_dict()
    out: dict[str, Any] = {"fingerprint": None, "parties": None}
    if isinstance(model, GuestModel):
        out = {"fingerprint": model.fingerprint, "parties": {"hosts": list(model.hosts)}}
    return {**out, "objective": params["objective"], "params": params}


def _shape(model: AnyModel) -> dict[str, Any]:
    """Trees and rounds (a host knows only the trees its splits are in)."""
    if isinstance(model, HostModel):
        return {
            "n_trees": None,
            "n_rounds": None,
            "trees_per_round": None,
            "best_iteration": None,
            "trees_with_own_splits": len({s.tree for s in model.splits}),
        }
    return {
        "n_trees": len(model.trees),
        "n_rounds": model.n_rounds,
        "trees_per_round": model.trees_per_round,
        "best_iteration": model.best_iteration,
    }


def _features(imp: Importance, names: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "splits": int(imp.split[i]),
            "gain": None if imp.gain is None else _finite(float(imp.gain[i])),
        }
        for i, name in enumerate(names)
    ]


def _splits(model: AnyModel) -> dict[str, int]:
    """Split nodes per party, over every tree in the file.

    The guest knows how many splits each host owns (not where they split); a host knows only
    its own; a complete model has no parties.
    """
    if isinstance(model, HostModel):
        return {"own": len(model.splits)}
    if isinstance(model, Booster):
        return {"all": sum(int(np.count_nonzero(t.feature >= 0)) for t in model.trees)}
    owners = np.concatenate([t.owner for t in model.trees]) if model.trees else np.empty(0)
    out = {"guest": int(np.count_nonzero(owners == GUEST))}
    for k, host in enumerate(model.hosts, start=1):
        out[host] = int(np.count_nonzero(owners == k))
    return out


def _contribution(model: AnyModel) -> dict[str, Any] | None:
    """The partners' contribution a guest's file knows (None for other files)."""
    if not isinstance(model, GuestModel):
        return None
    from p2pboost.app._contribution import summary

    return summary(model)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# -- text -------------------------------------------------------------------------------------


def format_description(d: Mapping[str, Any], *, top: int = 20) -> str:
    """The description as text for people; features sorted by importance, the ``top`` first."""
    lines = [f"{d['path']}: {d['title']}", f"  {'format':<14}{d['format']} v{d['version']}"]
    lines += [f"  {key:<14}{value}" for key, value in _summary(d)]
    lines += _feature_lines(d, top)
    lines += ["", "holds:", *(f"  - {s}" for s in d["holds"])]
    lines += ["does not hold:", *(f"  - {s}" for s in d["does_not_hold"])]
    return "\n".join(lines)


def _summary(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if d["fingerprint"] is not None:
        rows.append(("fingerprint", d["fingerprint"]))
    parties = d["parties"] or {}
    if "hosts" in parties:
        rows.append(("hosts", ", ".join(parties["hosts"])))
    if "guest" in parties:
        rows.append(("guest", parties["guest"]))
    if d["params"] is not None:
        rows.append(("objective", d["objective"]))
        rows.append(("parameters", _params_text(d["params"])))
    rows.append(("trees", _trees_text(d)))
    rows.append(("splits", ", ".join(f"{k} {v}" for k, v in d["splits"].items())))
    if d["kind"] == ModelKind.HETERO_HOST:
        rows.append(("evaluation", "none (the guest evaluates: it holds the labels)"))
    else:
        rows += [("evaluation", text) for text in _history_lines(d["history"], d["best_iteration"])]
    rows += _contribution_rows(d.get("contribution"))
    for name, value in d.get("diagnostics", {}).items():
        if not name.startswith("contribution."):  # shown above, in words
            rows.append(("diagnostics", f"{name} {value:.4f}"))
    if d.get("privacy"):
        rows.append(("privacy", _privacy_text(d["privacy"])))
    if d.get("label_privacy"):
        rows.append(("label privacy", _label_privacy_text(d["label_privacy"])))
    rows += [("WARNING", text) for text in d.get("warnings", [])]
    return rows


def _contribution_rows(c: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    from p2pboost.app._contribution import comparison_text, shares_text

    if not c:
        return []
    shares = shares_text(c["gain_share"])
    rows = [("gain share", f"{shares} (each party's share of the total gain)")]
    if c.get("validation"):
        rows.append(("lift", comparison_text(c["validation"])))
    else:
        rows.append(("lift", "not measured: train with [data] valid_path to compare guest-only"))
    return rows


def _privacy_text(p: Mapping[str, Any]) -> str:
    """The accountant's statement in one line (docs/explanation/differential-privacy.md)."""
    text = (
        f"epsilon = {p.get('epsilon', float('nan')):.6g} differential privacy of this model "
        f"({p.get('mechanism')}; {p.get('trees')} trees, {p.get('trees_per_ensemble')} per "
        f"ensemble; neighbours: {p.get('neighbouring')}); gradient bound {p.get('grad_bound')}; "
        f"noise: {p.get('noise')}"
    )
    return text + _understated(p)


def _label_privacy_text(p: Mapping[str, Any]) -> str:
    """The label-DP accountant's statement in one line (docs/explanation/defences.md)."""
    return (
        f"epsilon = {p.get('epsilon', float('nan')):.6g} label differential privacy towards "
        f"the hosts ({p.get('mechanism')}, {p.get('composition')}; {p.get('rounds')} rounds "
        f"at epsilon {p.get('epsilon_per_round', float('nan')):.6g}, noise scale "
        f"{p.get('noise_scale', float('nan')):.6g}; base margin: {p.get('base_margin')}; "
        f"neighbours: {p.get('neighbouring')}); noise: {p.get('noise')}"
    )


def _understated(p: Mapping[str, Any]) -> str:
    """A warning for models trained with the split sensitivity understated (before the gain
    bound became ``3 g*^2``): their split choices spent more than the record states."""
    bound, delta_g = p.get("grad_bound"), p.get("delta_g")
    if not isinstance(bound, int | float) or not isinstance(delta_g, int | float):
        return ""
    full = gain_sensitivity(float(bound))
    if delta_g >= full * (1 - 1e-12):
        return ""
    return (
        f"; WARNING: trained with the split sensitivity {delta_g:.6g} < 3 g*^2 = {full:.6g}: "
        f"its split choices spent up to {full / delta_g:.3g} times their share, so the epsilon "
        "above understates what the model spent (retrain it)"
    )


def _params_text(params: Mapping[str, Any]) -> str:
    defaults = BoostParams().to_dict()
    shown = [
        f"{k}={v}"
        for k, v in params.items()
        if k != "objective" and (k in _MAIN_PARAMS or v != defaults.get(k))
    ]
    return " ".join(shown)


def _trees_text(d: Mapping[str, Any]) -> str:
    if d["n_trees"] is None:
        return f"unknown to a host; its splits are in {d['trees_with_own_splits']} trees"
    text = f"{d['n_trees']} ({d['n_rounds']} rounds of {d['trees_per_round']})"
    if d["best_iteration"] is not None:
        text += f", best round {d['best_iteration'] + 1} (predictions stop there)"
    return text


def _history_lines(history: Mapping[str, Mapping[str, list[float | None]]], best: Any) -> list[str]:
    """One line per (set, metric): the last value, and the value at the best round."""
    if not history:
        return ["none stored (trained without an evaluation set, or by an older version)"]
    out = []
    for name, scores in history.items():
        for metric, values in scores.items():
            text = f"{name} {metric}: {_num(values[-1] if values else None)} after round"
            text += f" {len(values)}"
            if isinstance(best, int) and 0 <= best < len(values):
                text += f" ({_num(values[best])} at the best round {best + 1})"
            out.append(text)
    return out


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def _feature_lines(d: Mapping[str, Any], top: int) -> list[str]:
    """The used features, most important first, then the names of the unused ones."""
    feats = list(d["features"])
    has_gain = any(f["gain"] is not None for f in feats)
    used = sorted((f for f in feats if f["splits"] > 0), key=_importance_key)
    unused = [f["name"] for f in feats if f["splits"] == 0]
    header = f"{'feature':<24}{'splits':>8}" + (f"{'gain':>14}" if has_gain else "")
    whose = "every feature" if d["kind"] == ModelKind.BOOSTER else "this party's own features"
    lines = ["", f"{whose} ({len(feats)}), by importance:", f"  {header}"]
    for f in used[:top]:
        row = f"{f['name']:<24}{f['splits']:>8}"
        lines.append(f"  {row}{_num(f['gain']):>14}" if has_gain else f"  {row}")
    if len(used) > top:
        lines.append(f"  ... {len(used) - top} more used features (--json lists them all)")
    if unused:
        shown = ", ".join(unused[:top]) + (", ..." if len(unused) > top else "")
        lines.append(f"  never split on ({len(unused)}): {shown}")
    if d["kind"] == ModelKind.HETERO_HOST:
        lines.append("  (gains are the guest's: a host only counts its splits)")
    return lines


def _importance_key(f: Mapping[str, Any]) -> tuple[float, int]:
    """Sort by gain when known, then by split count, both descending."""
    return (-(f["gain"] or 0.0), -int(f["splits"]))
