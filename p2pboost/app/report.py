"""Plots of one party's model (``p2pboost report``): feature importance, learning curve and
(a vertical guest's) the partners' contribution.

Each party draws only what its own file holds (see :mod:`p2pboost.app.model_info`): the guest and
a complete booster plot gain and split counts of their own features, a host only its split
counts (gains are the guest's secret); the learning curve needs the evaluation history that
training stores in the guest's (or booster's) file, so hosts and older files get no curve.

matplotlib is an optional dependency (``p2pboost[report]``), imported only here and only when
a report is drawn. Figures are rendered with the Agg canvas directly, not through ``pyplot``:
no global backend is switched and no GUI is needed, so a report can be written from a server
or from inside an application that uses matplotlib itself.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from p2pboost.app.model_info import (
    AnyModel,
    Importance,
    ModelKind,
    feature_names_of,
    history_of,
    importance_of,
    kind_of,
    load_model,
)
from p2pboost.app.stability import load_result, stability_figure, table_csv
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.files import atomic_write
from p2pboost.gbdt.history import History
from p2pboost.hetero.model import GuestModel, HostModel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["write_report"]

#: At most this many features in the importance plot (the most important ones).
TOP_FEATURES = 20
_DPI = 100


def write_report(
    model_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    feature_names: Sequence[str] | None = None,
    overwrite: bool = False,
    stability: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Write ``<model>_importance.png``, with a stored history ``<model>_learning_curve.png``,
    and for a vertical guest's file ``<model>_contribution.png`` (each party's share of the
    total gain, and the federated model beside the guest-only one on the validation rows when
    it was measured: :mod:`p2pboost.app._contribution`) into ``out_dir`` (created if needed;
    by default the model file's own directory); returns the paths written.

    The default keeps each party's plots beside its own model: in a federation written by
    ``p2pboost init`` every party's file is ``out-<party>/model.json``, so plots written into
    one shared directory would all be called ``model_*.png``. A plot file that already exists
    is never replaced silently: unless ``overwrite`` (``--force``) is given, an
    :class:`InputError` names it before anything is drawn or written.

    Raises :class:`ConfigError` when matplotlib is not installed, :class:`ModelError` or
    :class:`InputError` for a file that is not a p2pboost model.

    ``stability``: a result file of ``p2pboost stability``; its table
    (``<model>_stability.csv``) and plot (``<model>_stability.png``) are written too.
    """
    figure_cls = _figure_class()
    model = load_model(model_path)
    names = feature_names_of(model, feature_names)
    out = Path(model_path).parent if out_dir is None else Path(out_dir)
    stem = Path(model_path).stem
    history = history_of(model)
    targets = [out / f"{stem}_importance.png"]
    if history:
        targets.append(out / f"{stem}_learning_curve.png")
    if isinstance(model, GuestModel):
        targets.append(out / f"{stem}_contribution.png")
    psi = None if stability is None else load_result(Path(stability))
    if psi is not None:
        targets += [out / f"{stem}_stability.csv", out / f"{stem}_stability.png"]
    if not overwrite:
        _refuse_existing(targets)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the report directory {out}: {exc}") from None
    written = [_save(_importance_figure(figure_cls, model, names), targets[0])]
    if history:
        figure = _curve_figure(figure_cls, history, _best(model))
        written.append(_save(figure, targets[1]))
    if isinstance(model, GuestModel):
        written.append(_save(_contribution_figure(figure_cls, model), targets[1 + bool(history)]))
    if psi is not None:
        atomic_write(targets[-2], table_csv(psi))
        written += [targets[-2], _save(stability_figure(figure_cls, psi), targets[-1])]
    return written


def _refuse_existing(targets: Sequence[Path]) -> None:
    """An InputError naming the first plot that exists (checked before any is written, so a
    refused report leaves every file as it was)."""
    for path in targets:
        if path.exists():
            raise InputError(
                f"{path} already exists; pass --force to replace it "
                "(overwrite=True from Python), or choose another directory with --out"
            )


def _figure_class() -> type[Figure]:
    """matplotlib's Figure bound to the Agg canvas, or a ConfigError saying what to install."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "p2pboost report draws with matplotlib, which is not installed: "
            "pip install 'p2pboost[report]'"
        ) from None

    class AggFigure(Figure):
        """A Figure that renders with Agg whatever pyplot's backend is."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            FigureCanvasAgg(self)

    return AggFigure


def _save(figure: Figure, path: Path) -> Path:
    try:
        figure.savefig(path, dpi=_DPI, format="png")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None
    return path


def _best(model: AnyModel) -> int | None:
    """The round predictions stop at (a host's file does not know it)."""
    return None if isinstance(model, HostModel) else model.best_iteration


# -- feature importance -----------------------------------------------------------------------


def _importance_figure(figure_cls: type[Figure], model: AnyModel, names: list[str]) -> Figure:
    """Horizontal bars of the ``TOP_FEATURES`` most important own features.

    One panel for split counts, and one for each feature's share of the total gain (in %)
    when the party knows gains; every bar carries its value, so that features far behind the
    first stay readable on a linear axis.
    """
    imp = importance_of(model)
    order = _top(imp)
    panels: list[tuple[str, np.ndarray]] = [("number of splits", imp.split)]
    if imp.gain is not None:
        total = float(imp.gain.sum())
        share = 100.0 * imp.gain / total if total > 0 else imp.gain
        panels.insert(0, ("share of the total gain (%)", share))
    height = 1.8 + 0.28 * max(len(order), 1)
    figure = figure_cls(figsize=(6.0 * len(panels), height), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    labels = [names[i] for i in order]
    for ax, (title, values) in zip(axes, panels, strict=True):
        bars = ax.barh(range(len(order)), values[order], color="tab:blue")
        fmt = "%.1f%%" if title.endswith("(%)") else "%d"
        ax.bar_label(bars, fmt=fmt, padding=2, fontsize="small")
        ax.margins(x=0.15)  # room for the labels
        ax.set_yticks(range(len(order)), labels)
        ax.invert_yaxis()  # most important on top
        ax.set_xlabel(title)
    axes[-1].xaxis.set_major_locator(_integer_ticks())  # the split counts
    if not order.size:
        axes[0].text(0.5, 0.5, "no split on this party's features", ha="center", va="center")
    figure.suptitle(_importance_title(kind_of(model), len(names), order.size), fontsize="medium")
    return figure


def _top(imp: Importance) -> np.ndarray:
    """Indices of the used features, most important first (gain, then splits), at most TOP."""
    key = imp.split if imp.gain is None else imp.gain
    used = np.flatnonzero(imp.split > 0)
    order = used[np.lexsort((-imp.split[used], -key[used]))]
    return order[:TOP_FEATURES]


def _importance_title(kind: ModelKind, n_features: int, shown: int) -> str:
    who, note = {
        ModelKind.HETERO_GUEST: ("the guest's own features", "hosts' features are not in its file"),
        ModelKind.HETERO_HOST: ("this host's own features", "gains are the guest's secret"),
        ModelKind.BOOSTER: ("every feature", "complete model"),
    }[kind]
    return f"Feature importance of {who}\n{shown} used of {n_features}; {note}"


# -- the partners' contribution ---------------------------------------------------------------


def _contribution_figure(figure_cls: type[Figure], model: GuestModel) -> Figure:
    """Each party's share of the total gain; beside it, when the guest had validation rows,
    the federated model's validation metric and the guest-only model's."""
    from p2pboost.app._contribution import comparison_of, gain_shares

    shares = gain_shares(model)
    comparison = comparison_of(model.diagnostics)
    figure = figure_cls(figsize=(5.5 * (1 + (comparison is not None)), 3.6), layout="constrained")
    axes = figure.subplots(1, 1 + (comparison is not None), squeeze=False)[0]
    bars = axes[0].bar(list(shares), [100.0 * v for v in shares.values()], color="tab:blue")
    axes[0].bar_label(bars, fmt="%.1f%%", padding=2, fontsize="small")
    axes[0].set_ylabel("share of the total gain (%)")
    axes[0].margins(y=0.15)
    if not shares:
        axes[0].text(0.5, 0.5, "no gains in this file", ha="center", va="center")
    if comparison is not None:
        values = [comparison["federated"], comparison["guest_only"]]
        bars = axes[1].bar(["federated", "guest only"], values, color=["tab:green", "tab:grey"])
        axes[1].bar_label(bars, fmt="%.4f", padding=2, fontsize="small")
        axes[1].set_ylabel(f"validation {comparison['metric']}")
        axes[1].set_title(
            f"lift {comparison['lift']:+.4f} on {comparison['valid_rows']} rows", fontsize="small"
        )
        axes[1].margins(y=0.15)
    figure.suptitle("What each party's data contributed")
    return figure


# -- learning curve ---------------------------------------------------------------------------


def _curve_figure(figure_cls: type[Figure], history: History, best: int | None) -> Figure:
    """One panel per metric, one line per evaluation set; a dotted line at the best round."""
    metrics = list(dict.fromkeys(m for scores in history.values() for m in scores))
    figure = figure_cls(figsize=(5.5 * len(metrics), 4.0), layout="constrained")
    axes = figure.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        for name, scores in history.items():
            values = scores.get(metric)
            if values:
                rounds = np.arange(1, len(values) + 1)
                ax.plot(rounds, _finite(values), marker="." if len(values) < 30 else "", label=name)
        if best is not None:
            ax.axvline(best + 1, color="grey", linestyle=":", label=f"best round ({best + 1})")
        ax.set_xlabel("boosting round")
        ax.xaxis.set_major_locator(_integer_ticks())
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle("Learning curve")
    return figure


def _integer_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _finite(values: list[float]) -> np.ndarray:
    """NaN where a round's metric was undefined (matplotlib leaves a gap)."""
    return np.array([v if math.isfinite(v) else np.nan for v in values], dtype=np.float64)
