"""``p2pboost predict --contributions``: explanations written beside the scores.

Why a file of its own: an adverse-action notice needs, per applicant, the features (and
hosts) that raised the score most; a model-risk reviewer wants every contribution. The
guest writes, per row, its id, its score's margin contributions (one column per guest
feature, one per host, or one per feature token of a host that consents, then
``base_value``; they add up to the margin) and the top ``k`` reason codes (``reason_1``,
``reason_1_value``, ...). The file is never overwritten without ``--force``: it is the record
a notice was written from.

A host that consents (``[predict] explain_features = true``) writes its own record,
``feature_tokens.csv``: which of the guest's ``host:token`` columns is which of its features.
Tokens are drawn anew for every prediction, so only the record of that run maps them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from p2pboost.app._tables import write_csv
from p2pboost.exceptions import ConfigError

if TYPE_CHECKING:
    from p2pboost.app.config import PartyConfig, PredictConfig
    from p2pboost.hetero.inference.explain import Contributions, FeatureTokens

__all__ = ["check_explanations", "predict_options", "record_tokens", "write_explanations"]


def predict_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``predict`` command's explanation flags (they set ``[predict]`` keys)."""
    command = click.option(
        "--force", is_flag=True, help="Overwrite an existing explanations file."
    )(command)
    command = click.option(
        "--reasons",
        type=click.IntRange(0),
        default=None,
        help="Guest: the top K reason codes per row in the explanations file.",
    )(command)
    return click.option(
        "--contributions",
        is_flag=True,
        help="Guest: also write every row's TreeSHAP contributions and base value "
        "([predict] explanations, default explanations.csv).",
    )(command)


def predict_changes(contributions: bool, reasons: int | None, force: bool) -> dict[str, Any]:
    """The ``[predict]`` settings the flags change (a flag left out keeps the file's)."""
    changes: dict[str, Any] = {}
    if contributions:
        changes["contributions"] = True
    if reasons is not None:
        changes["reasons"] = reasons
    if force:
        changes["force"] = True
    return changes


def wants_explanations(predict: PredictConfig) -> bool:
    return predict.contributions or predict.reasons > 0


def check_explanations(config: PartyConfig) -> Path | None:
    """Where this guest's explanations go (None: not asked for); refused before any work
    when the file exists and ``force`` is off, or when rows are aligned by PSI (a row not
    scored has no explanation)."""
    predict = config.predict
    if not wants_explanations(predict):
        return None
    path = config.workdir / predict.explanations
    if predict.align != "ids":
        raise ConfigError(f"{config.source}: explanations need [predict] align = 'ids'")
    if predict.private:
        raise ConfigError(
            f"{config.source}: explanations need the hosts' decision bits, which private "
            "inference withholds: drop --contributions/--reasons or set [predict] private = false"
        )
    if path.exists() and not predict.force:
        raise ConfigError(f"{path} exists: move it away, or overwrite it with --force")
    return path


def write_explanations(
    path: Path,
    id_column: str,
    ids: Any,
    contributions: Contributions,
    predict: PredictConfig,
) -> None:
    """One row per id: contributions (with ``contributions``) and reason codes."""
    values = contributions.values
    if values.ndim != 2:
        raise ConfigError("explanations are written for single-output models")
    header = [id_column]
    columns: list[list[object]] = [[i] for i in ids.tolist()]
    if predict.contributions:
        header += contributions.names
        for row, v in zip(columns, values.tolist(), strict=True):
            row.extend(repr(float(x)) for x in v)
    if predict.reasons:
        for j in range(1, predict.reasons + 1):
            header += [f"reason_{j}", f"reason_{j}_value"]
        for row, reasons in zip(columns, contributions.reasons(predict.reasons), strict=True):
            for j in range(predict.reasons):
                name, value = reasons[j] if j < len(reasons) else ("", None)
                row.extend([name, "" if value is None else repr(float(value))])
    write_csv(path, header, columns)


def record_tokens(path: Path, party: str) -> Callable[[FeatureTokens], None]:
    """A consenting host's ``on_tokens``: write ``column,feature`` (the guest's column name,
    this host's feature name) for each session's tokens."""

    def record(tokens: FeatureTokens) -> None:
        rows = sorted(tokens.names(party).items())
        write_csv(path, ["column", "feature"], [list(r) for r in rows])

    return record
