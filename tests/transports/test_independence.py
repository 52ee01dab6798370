"""Transports are a bytes-only layer: they load, and raise, nothing of p2pboost."""

from __future__ import annotations

import subprocess
import sys

import transports
from transports import errors


def test_importing_the_transports_loads_no_p2pboost_module() -> None:
    code = (
        "import sys, transports, transports.memory, transports.websocket;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'p2pboost'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_transport_errors_keep_the_standard_families() -> None:
    assert issubclass(errors.TransportError, ConnectionError)
    assert issubclass(errors.HandshakeError, errors.TransportError)
    assert issubclass(errors.FrameTooLarge, errors.TransportError)
    assert issubclass(errors.TransportConfigError, ValueError)
    assert issubclass(errors.TransportUsageError, RuntimeError)
    assert errors.HandshakeError("x").certificate_refused is False
    for name in errors.__all__:
        assert name in (errors.__doc__ or ""), name
        assert getattr(transports, name) is getattr(errors, name)
