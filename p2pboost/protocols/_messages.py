"""Protocol messages as values: one frozen dataclass per message, one tag, one validator.

Every protocol message is a frozen dataclass deriving from a family's :class:`Message` base.
On the wire it is a msgpack map ``{"t": tag, field: value, ...}`` whose values are what the
codec carries (ints, floats, strings, bytes, lists, maps, numpy arrays, ciphertext batches,
public keys). Each field's annotation names its rule (``Annotated[int, Int(1, MAX_ROWS)]``),
so the one validation path, :func:`decode`, checks the type, range, dtype, shape and length of
everything a peer sends and raises :class:`~p2pboost.exceptions.RemoteProtocolError` naming
the peer for anything else. A message's :meth:`Message.check` adds the rules between its own
fields (arrays of equal length); rules that need the protocol's state (a node id being split,
the round in progress) are checked where that state lives and raised with :func:`reject`, so
every refusal reads the same.

``docs/reference/wire.md`` lists every message of every family from these definitions
(:func:`wire_reference`; a test keeps the page and the code equal).

Why not a schema library: the rules are few and must cover numpy arrays and the codec's own
types without a copy; one small module that peers' input cannot get around is easier to audit.
"""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, overload

import numpy as np

from p2pboost.exceptions import RemoteProtocolError

__all__ = [
    "TAG",
    "Array",
    "Bool",
    "Bytes",
    "Float",
    "Instance",
    "Int",
    "ListOf",
    "MapOf",
    "Message",
    "OneOf",
    "Opaque",
    "Optional",
    "Rule",
    "Str",
    "decode",
    "families",
    "recv",
    "reject",
    "send",
    "wire_reference",
]

#: The key that names a message's type on the wire.
TAG = "t"
M = TypeVar("M", bound="Message")
A = TypeVar("A", bound="Message")
B = TypeVar("B", bound="Message")
C = TypeVar("C", bound="Message")


class _Invalid(Exception):
    """A value broke a rule (turned into a RemoteProtocolError naming peer and field)."""


def reject(peer: str, what: str) -> RemoteProtocolError:
    """The error for a message that breaks a protocol rule: ``raise reject(peer, "...")``."""
    return RemoteProtocolError(what, peer=peer)


# -- rules ---------------------------------------------------------------------------------------


class Rule(ABC):
    """What one field may hold."""

    @abstractmethod
    def check(self, value: object) -> Any:
        """The value if it follows the rule (possibly normalised); raises otherwise."""

    @abstractmethod
    def describe(self) -> str:
        """The rule in a few words, for the wire reference."""


def _bound(v: float | None) -> str:
    if v is None:
        return ""
    if isinstance(v, int) and abs(v) >= 1 << 20 and v == 1 << (v.bit_length() - 1):
        return f"2**{v.bit_length() - 1}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return f"{v:g}"


@dataclass(frozen=True)
class Int(Rule):
    """An integer (never a bool) in ``[low, high]``."""

    low: int
    high: int

    def check(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be an integer, not {type(value).__name__}")
        if not self.low <= value <= self.high:
            raise _Invalid(f"must be in [{self.low}, {self.high}], got {value}")
        return value

    def describe(self) -> str:
        return f"int [{_bound(self.low)}, {_bound(self.high)}]"


@dataclass(frozen=True)
class Float(Rule):
    """A finite float (an int is accepted and converted)."""

    low: float | None = None
    high: float | None = None

    def check(self, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(f"must be a number, not {type(value).__name__}")
        v = float(value)
        if not np.isfinite(v):
            raise _Invalid("must be finite")
        if (self.low is not None and v < self.low) or (self.high is not None and v > self.high):
            raise _Invalid(f"must be in [{self.low}, {self.high}], got {v}")
        return v

    def describe(self) -> str:
        if self.low is None and self.high is None:
            return "float"
        return f"float [{_bound(self.low)}, {_bound(self.high)}]"


@dataclass(frozen=True)
class Bool(Rule):
    def check(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise _Invalid(f"must be a boolean, not {type(value).__name__}")
        return value

    def describe(self) -> str:
        return "bool"


@dataclass(frozen=True)
class Str(Rule):
    """A string of ``min_len`` to ``max_len`` characters."""

    min_len: int = 0
    max_len: int = 1024

    def check(self, value: object) -> str:
        if not isinstance(value, str) or not self.min_len <= len(value) <= self.max_len:
            raise _Invalid(f"must be a string of {self.min_len} to {self.max_len} characters")
        return value

    def describe(self) -> str:
        return f"str [{self.min_len}, {_bound(self.max_len)}]"


@dataclass(frozen=True)
class Bytes(Rule):
    """Bytes of ``min_len`` to ``max_len`` bytes."""

    min_len: int = 0
    max_len: int = 1 << 20

    def check(self, value: object) -> bytes:
        if not isinstance(value, bytes) or not self.min_len <= len(value) <= self.max_len:
            raise _Invalid(f"must be {self.min_len} to {self.max_len} bytes")
        return value

    def describe(self) -> str:
        if self.min_len == self.max_len:
            return f"bytes[{self.min_len}]"
        return f"bytes [{self.min_len}, {_bound(self.max_len)}]"


@dataclass(frozen=True)
class Array(Rule):
    """A numpy array of exactly ``dtype`` with ``ndim`` dimensions (at most ``max_len``
    elements on the first axis)."""

    dtype: str
    ndim: int = 1
    max_len: int | None = None

    def check(self, value: object) -> np.ndarray[Any, Any]:
        if (
            not isinstance(value, np.ndarray)
            or value.dtype != np.dtype(self.dtype)
            or value.ndim != self.ndim
        ):
            raise _Invalid(f"must be a {self.ndim}-d {self.dtype} array")
        if self.max_len is not None and value.shape[0] > self.max_len:
            raise _Invalid(f"must have at most {self.max_len} elements")
        return value

    def describe(self) -> str:
        dims = ", ".join(["n"] * self.ndim)
        cap = f", n <= {_bound(self.max_len)}" if self.max_len is not None else ""
        return f"{self.dtype}[{dims}]{cap}"


@dataclass(frozen=True)
class Instance(Rule):
    """A value of one of the codec's own types (e.g. a ciphertext batch, a public key)."""

    cls: type

    def check(self, value: object) -> Any:
        if not isinstance(value, self.cls):
            raise _Invalid(f"must be a {self.cls.__name__}")
        return value

    def describe(self) -> str:
        return self.cls.__name__


@dataclass(frozen=True)
class OneOf(Rule):
    """A value following the first of ``rules`` that accepts it."""

    rules: tuple[Rule, ...]

    def check(self, value: object) -> Any:
        for rule in self.rules:
            try:
                return rule.check(value)
            except _Invalid:
                continue
        raise _Invalid(f"must be {self.describe()}")

    def describe(self) -> str:
        return " or ".join(r.describe() for r in self.rules)


@dataclass(frozen=True)
class Optional(Rule):
    """``None`` or a value of ``inner``."""

    inner: Rule

    def check(self, value: object) -> Any:
        return None if value is None else self.inner.check(value)

    def describe(self) -> str:
        return f"{self.inner.describe()} or nil"


@dataclass(frozen=True)
class ListOf(Rule):
    """A list of ``min_len`` to ``max_len`` items, each following ``item``."""

    item: Rule
    max_len: int
    min_len: int = 0

    def check(self, value: object) -> list[Any]:
        if not isinstance(value, list) or not self.min_len <= len(value) <= self.max_len:
            raise _Invalid(f"must be a list of {self.min_len} to {self.max_len} items")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(self.item.check(v))
            except _Invalid as exc:
                raise _Invalid(f"item {i}: {exc}") from None
        return out

    def describe(self) -> str:
        size = (
            f"{self.min_len}"
            if self.min_len == self.max_len
            else f"[{self.min_len}, {_bound(self.max_len)}]"
        )
        return f"list {size} of ({self.item.describe()})"


@dataclass(frozen=True)
class MapOf(Rule):
    """A map of at most ``max_len`` entries with keys and values following the rules."""

    key: Rule
    value: Rule
    max_len: int

    def check(self, value: object) -> dict[Any, Any]:
        if not isinstance(value, dict) or len(value) > self.max_len:
            raise _Invalid(f"must be a map of at most {self.max_len} entries")
        out = {}
        for k, v in value.items():
            try:
                out[self.key.check(k)] = self.value.check(v)
            except _Invalid as exc:
                raise _Invalid(f"entry {k!r}: {exc}") from None
        return out

    def describe(self) -> str:
        return f"map <= {_bound(self.max_len)} of ({self.key.describe()}: {self.value.describe()})"


@dataclass(frozen=True)
class Opaque(Rule):
    """Any value the codec decodes, checked by whoever reads it (e.g. a tree's own parser,
    which raises on anything that is not a tree)."""

    what: str

    def check(self, value: object) -> Any:
        return value

    def describe(self) -> str:
        return self.what


# -- messages ------------------------------------------------------------------------------------

_FAMILIES: dict[str, dict[str, type[Message]]] = {}


class Message:
    """Base of every protocol message (see the module docstring).

    A family's base sets ``FAMILY``; each message class passes its ``tag``::

        @dataclass(frozen=True)
        class Hello(HeteroMessage, tag="hello"):
            n_rows: Annotated[int, Int(1, MAX_ROWS)]
    """

    FAMILY: ClassVar[str] = ""
    TAG: ClassVar[str] = ""
    _rules: ClassVar[dict[str, Rule] | None] = None

    def __init_subclass__(cls, *, tag: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if tag:
            if not cls.FAMILY:
                raise TypeError(f"{cls.__name__}: a message belongs to a family")
            cls.TAG = tag
            cls._rules = None
            _FAMILIES.setdefault(cls.FAMILY, {})[tag] = cls

    def check(self) -> str | None:
        """A rule between this message's fields it breaks (a sentence), or ``None``."""
        return None

    def wire(self) -> dict[str, Any]:
        """The map that goes on the wire."""
        out: dict[str, Any] = {TAG: self.TAG}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = getattr(self, f.name)
        return out

    @classmethod
    def rules(cls) -> dict[str, Rule]:
        """Field name -> rule, from the ``Annotated`` hints (computed once per class)."""
        if cls._rules is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            rules = {}
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                meta = getattr(hints[f.name], "__metadata__", ())
                rule = next((m for m in meta if isinstance(m, Rule)), None)
                if rule is None:
                    raise TypeError(f"{cls.__name__}.{f.name} has no rule")
                rules[f.name] = rule
            cls._rules = rules
        return cls._rules


@overload
def decode(obj: object, expected: type[A], peer: str) -> A: ...
@overload
def decode(obj: object, expected: tuple[type[A], type[B]], peer: str) -> A | B: ...
@overload
def decode(obj: object, expected: tuple[type[A], type[B], type[C]], peer: str) -> A | B | C: ...


def decode(obj: object, expected: type[M] | Sequence[type[M]], peer: str) -> M:
    """Validate ``obj`` (a decoded wire value) as one of the ``expected`` message types.

    The one validation path for everything a peer sends: a
    :class:`~p2pboost.exceptions.RemoteProtocolError` naming ``peer`` for anything else.
    """
    kinds = [expected] if isinstance(expected, type) else list(expected)
    by_tag = {k.TAG: k for k in kinds}
    tag = obj.get(TAG) if isinstance(obj, dict) else None
    cls = by_tag.get(tag) if isinstance(tag, str) else None
    if cls is None:
        wanted = " or ".join(repr(t) for t in by_tag)
        got = repr(tag) if isinstance(obj, dict) else type(obj).__name__
        raise RemoteProtocolError(f"expected a {wanted} message, got {got}", peer=peer)
    assert isinstance(obj, dict)
    rules = cls.rules()
    names = set(obj) - {TAG}
    if names != set(rules):
        extra, missing = sorted(names - set(rules)), sorted(set(rules) - names)
        raise RemoteProtocolError(
            f"{tag!r} message: unexpected fields {extra}, missing {missing}", peer=peer
        )
    values = {}
    for name, rule in rules.items():
        try:
            values[name] = rule.check(obj[name])
        except _Invalid as exc:
            raise RemoteProtocolError(f"{tag!r} message: {name!r} {exc}", peer=peer) from None
    msg = cls(**values)
    problem = msg.check()
    if problem is not None:
        raise RemoteProtocolError(f"{tag!r} message: {problem}", peer=peer)
    return msg


class _Channel(Protocol):
    """What :func:`send` and :func:`recv` need of a node channel."""

    peer: str

    async def send(self, obj: object) -> None: ...

    async def recv(self) -> object: ...


async def send(channel: _Channel, msg: Message) -> None:
    """Send ``msg`` on ``channel``."""
    await channel.send(msg.wire())


@overload
async def recv(channel: _Channel, expected: type[A]) -> A: ...
@overload
async def recv(channel: _Channel, expected: tuple[type[A], type[B]]) -> A | B: ...
@overload
async def recv(channel: _Channel, expected: tuple[type[A], type[B], type[C]]) -> A | B | C: ...


async def recv(channel: _Channel, expected: Any) -> Any:
    """The next message on ``channel``, validated as one of ``expected``."""
    return decode(await channel.recv(), expected, channel.peer)


def families() -> Mapping[str, Mapping[str, type[Message]]]:
    """Every message family and its messages by tag (import the families' modules first)."""
    return _FAMILIES


def wire_reference(names: Sequence[str]) -> str:
    """The Markdown tables of every message of the families ``names``, in that order (for
    docs/reference/wire.md)."""
    lines = []
    for family in names:
        lines += [f"### `{family}`", "", "| tag | field | rule |", "|---|---|---|"]
        for tag, cls in _FAMILIES[family].items():
            doc = " ".join((cls.__dict__.get("__doc__") or "").split())
            lines.append(f"| `{tag}` | | {doc} |")
            for name, rule in cls.rules().items():
                lines.append(f"| | `{name}` | {rule.describe()} |")
        lines.append("")
    return "\n".join(lines)
