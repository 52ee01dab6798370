"""The exception tree keeps the standard library's families, so callers can catch either."""

from __future__ import annotations

import pytest

import p2pboost
from p2pboost import exceptions as exc


@pytest.mark.parametrize(
    ("cls", "family"),
    [
        (exc.InputError, ValueError),
        (exc.NotFittedError, ValueError),
        (exc.ConfigError, ValueError),
        (exc.CodecError, ValueError),
        (exc.ModelError, ValueError),
        (exc.TransportError, ConnectionError),
        (exc.HandshakeError, ConnectionError),
        (exc.DeadlineExceeded, TimeoutError),
    ],
)
def test_errors_keep_standard_families(cls: type[Exception], family: type[Exception]) -> None:
    assert issubclass(cls, exc.P2PBoostError)
    assert issubclass(cls, family)


def test_every_public_error_is_drawn_in_the_docstring() -> None:
    doc = exc.__doc__ or ""
    for name in exc.__all__:
        assert name in doc, name


def test_remote_errors_name_the_peer() -> None:
    err = exc.RemoteProtocolError("bad frame", peer="host1")
    assert err.peer == "host1"
    assert "host1" in str(err)
    assert exc.PeerDisconnected("host2").peer == "host2"


def test_package_exports_are_importable() -> None:
    for name in p2pboost.__all__:
        assert hasattr(p2pboost, name), name
