"""Typed, strict access to the tables of a party's TOML file, with errors that say where."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from p2pboost.exceptions import ConfigError, InputError
from p2pboost.gbdt.params import BoostParams

__all__ = ["Reader", "boost_params", "enum_of", "kind_of", "unknown_key"]

_E = TypeVar("_E", bound=Enum)


class Reader:
    """Typed access to one table of one file, with errors that say where."""

    def __init__(self, source: Path, table: Mapping[str, Any], prefix: str) -> None:
        self.source = source
        self.table = table
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {self.prefix}{key}: {problem}")

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in allowed:
                raise unknown_key(self.source, self.prefix + key, key, allowed)

    def get_str(self, key: str, default: str | None = None, *, empty: bool = False) -> str | None:
        value = self.table.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {kind_of(value)}")
        if not value and not empty:
            raise self.fail(key, "must not be empty")
        return value

    def required(self, key: str) -> str:
        value = self.get_str(key)
        if value is None:
            raise ConfigError(f"{self.source}: missing required key {self.prefix}{key}")
        return value

    def get_int(self, key: str, default: int) -> int:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {kind_of(value)}")
        return value

    def get_float(self, key: str, default: float) -> float:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {kind_of(value)}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {kind_of(value)}")
        return value

    def sub(self, key: str) -> Reader:
        value = self.table.get(key, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source}: [{key}] must be a table, got {kind_of(value)}")
        return Reader(self.source, value, f"{key}.")


def kind_of(value: object) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), f"a {type(value).__name__}"
    )


def unknown_key(source: Path, shown: str, key: str, allowed: tuple[str, ...]) -> ConfigError:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(allowed)}"
    return ConfigError(f"{source}: unknown key {shown!r}{hint}")


def enum_of(kind: type[_E], value: str, key: str, source: Path) -> _E:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in kind)
        raise ConfigError(f"{source}: {key} = {value!r}: choose one of {choices}") from None


def boost_params(reader: Reader) -> BoostParams:
    """BoostParams from the keys of a [train] table named as its fields, typed by each
    field's default."""
    defaults = BoostParams()
    kwargs: dict[str, Any] = {}
    for name in (f.name for f in dataclasses.fields(defaults)):
        if name not in reader.table:
            continue
        default = getattr(defaults, name)
        value = reader.table[name]
        if name == "sparse_aware" and isinstance(value, bool):
            kwargs[name] = value
        elif name == "dp":
            if not isinstance(value, Mapping):
                raise reader.fail(name, f"expected a table [train.dp], got {kind_of(value)}")
            kwargs[name] = dict(value)
        elif name in ("monotone_constraints", "interaction_constraints"):
            kwargs[name] = value  # arrays or a table by name; BoostParams checks them
        elif isinstance(default, bool):
            kwargs[name] = reader.get_bool(name, default)
        elif isinstance(default, int):
            kwargs[name] = reader.get_int(name, default)
        elif isinstance(default, float) or default is None:
            kwargs[name] = reader.get_float(name, 0.0)
        else:  # strings and string enums
            kwargs[name] = reader.get_str(name)
    try:
        return BoostParams().with_updates(**kwargs)
    except (InputError, ValueError) as exc:
        raise ConfigError(f"{reader.source}: [train]: {exc}") from None
