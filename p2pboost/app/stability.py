"""Population stability of one party's features and of the guest's scores (``p2pboost
stability``), and its table and plot in ``p2pboost report``.

Each party runs it on its own side, with no network: its own features of the training rows
(the ``[data]`` file of its party file) against a new batch (a CSV with the same columns), in
the model's bins (:mod:`p2pboost.gbdt.stability`); no row and no count leaves the party.

* The guest bins its features with its model file's bins (the edges training used).
* A host's model file holds its split thresholds only, not its bins: it fits training's
  quantile bins again on its training file, with ``[train] max_bin`` of its party file (set it
  to the guest's, 32 by default, for the same bins as training).
* The scores (guest): scores are made by the federation (every host answers), so they are read
  from the ``id,score`` files ``p2pboost predict`` writes: one over the training rows
  (``--train-scores``), one over the new batch (``--scores``). Their bins are the training
  scores' deciles (:func:`~p2pboost.gbdt.stability.score_edges`).

The result is one JSON file (``workdir/stability.json`` unless ``--out``; an existing file is
replaced only with ``--force``) that ``p2pboost report --stability`` draws.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from p2pboost.app._progress import PartyResult
from p2pboost.app._tables import load_table
from p2pboost.app.config import PartyConfig, Role
from p2pboost.app.model_info import load_model
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.files import atomic_write
from p2pboost.gbdt.binning import BinMapper
from p2pboost.gbdt.stability import SHIFT, STABLE, band, feature_counts, psi, score_counts
from p2pboost.gbdt.stability import score_edges as decile_edges
from p2pboost.hetero.model import GuestModel, HostModel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "RESULT_FILE",
    "format_table",
    "load_result",
    "read_scores",
    "run_stability",
    "stability_figure",
    "table_csv",
]

F64 = npt.NDArray[np.float64]
RESULT_FILE = "stability.json"
FORMAT = "p2pboost-stability"


def read_scores(path: Path) -> F64:
    """The ``score`` column of an ``id,score`` file (rows no host could score are skipped)."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if not rows or "score" not in rows[0]:
        raise InputError(f"{path}: no 'score' column (an id,score file of p2pboost predict)")
    try:
        values = [float(r["score"]) for r in rows if r["score"] not in ("", None)]
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
    return np.asarray(values, dtype=np.float64)


def run_stability(
    config: PartyConfig,
    batch: Path,
    *,
    scores: Path | None = None,
    train_scores: Path | None = None,
    out: Path | None = None,
    force: bool = False,
) -> tuple[PartyResult, dict[str, Any]]:
    """PSI of this party's features (training file against ``batch``) and, for the guest with
    both score files, of the scores; writes the result file and returns it with a summary."""
    if config.role not in (Role.GUEST, Role.HOST):
        raise ConfigError(f"{config.source}: stability is for a vertical guest or host")
    if config.data is None:
        raise ConfigError(f"{config.source}: stability needs [data]")
    if (scores is None) != (train_scores is None):
        raise ConfigError("give both --scores and --train-scores, or neither")
    if scores is not None and config.role is not Role.GUEST:
        raise ConfigError("only the guest has scores")
    target = out or config.workdir / RESULT_FILE
    if target.exists() and not force:
        raise ConfigError(f"{target} exists: pass --force to replace it")
    model = load_model(config.model_path)
    if not isinstance(model, GuestModel | HostModel):
        raise ConfigError(f"{config.model_path} is not a vertical party's model file")
    names = model.feature_names
    train = load_table(config.data, require_label=False, model_features=names)
    new = load_table(config.data, batch, require_label=False, model_features=names)
    if isinstance(model, GuestModel):
        mapper = model.mapper
    else:  # the host file keeps thresholds only: training's bins, fitted again
        mapper = BinMapper(config.train.params.max_bin).fit(train.X)
    result: dict[str, Any] = {
        "format": FORMAT,
        "party": config.id,
        "rows": {"train": int(train.ids.size), "batch": int(new.ids.size)},
        "features": [],
        "score": None,
    }
    if mapper.n_features:
        expected = feature_counts(mapper, train.X)
        actual = feature_counts(mapper, new.X)
        for name, value in zip(train.features, psi(expected, actual).tolist(), strict=True):
            result["features"].append({"feature": name, "psi": value, "band": band(value)})
    if scores is not None and train_scores is not None:
        before, after = read_scores(train_scores), read_scores(scores)
        edges = decile_edges(before)
        e, a = score_counts(before, edges), score_counts(after, edges)
        value = float(psi(e, a))
        result["score"] = {
            "psi": value,
            "band": band(value),
            "edges": edges.tolist(),
            "expected": e.tolist(),
            "actual": a.tolist(),
        }
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, (json.dumps(result, indent=2) + "\n").encode())
    worst = max([f["psi"] for f in result["features"]] or [0.0])
    summary = {
        "rows": result["rows"],
        "max_feature_psi": worst,
        "shifted": [f["feature"] for f in result["features"] if f["band"] == "shift"],
        "score_psi": None if result["score"] is None else result["score"]["psi"],
    }
    c = config
    return PartyResult(c.id, c.role.value, "stability", (str(target),), summary), result


def load_result(path: Path) -> dict[str, Any]:
    """A stability result file, checked to be one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the stability file {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path} is not a p2pboost stability file")
    return data


def _lines(result: dict[str, Any]) -> list[tuple[str, float, str]]:
    out = [(f["feature"], float(f["psi"]), f["band"]) for f in result["features"]]
    if result.get("score") is not None:
        out.insert(0, ("(score)", float(result["score"]["psi"]), result["score"]["band"]))
    return out


def format_table(result: dict[str, Any]) -> str:
    """The readable table: one line per feature (the score first), PSI and band."""
    lines = _lines(result)
    width = max([len(n) for n, _, _ in lines] + [7])
    rows = result["rows"]
    text = [
        f"{result['party']}: {rows['train']} training rows, {rows['batch']} new rows",
        f"{'feature':<{width}}  {'psi':>8}  band",
    ]
    text += [f"{n:<{width}}  {v:>8.4f}  {b}" for n, v, b in lines]
    return "\n".join(text)


def table_csv(result: dict[str, Any]) -> bytes:
    """``feature,psi,band`` (the score as ``(score)``), for the report."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["feature", "psi", "band"])
    writer.writerows(_lines(result))
    return buffer.getvalue().encode()


def stability_figure(figure_cls: type[Figure], result: dict[str, Any]) -> Figure:
    """Horizontal PSI bars per feature (and the score), the bands' limits as lines."""
    lines = _lines(result)
    names: Sequence[str] = [n for n, _, _ in lines]
    values = [v if math.isfinite(v) else 0.0 for _, v, _ in lines]
    colours = {"stable": "tab:green", "watch": "tab:orange", "shift": "tab:red"}
    figure = figure_cls(figsize=(7, 1.5 + 0.3 * max(1, len(names))))
    ax = figure.add_subplot()
    y = np.arange(len(names))[::-1]
    ax.barh(y, values, color=[colours[b] for _, _, b in lines])
    ax.set_yticks(y, labels=names)
    for limit in (STABLE, SHIFT):
        ax.axvline(limit, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("population stability index (PSI)")
    ax.set_title(f"{result['party']}: stability of the new batch (< 0.1 stable, > 0.25 shift)")
    figure.tight_layout()
    return figure
