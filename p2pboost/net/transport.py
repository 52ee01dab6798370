"""Where p2pboost meets :mod:`p2pboost.transports`: the default transport, and errors translated.

Transports are a bytes-only layer that imports nothing of p2pboost: they take ready TLS
contexts and raise their own exceptions (:mod:`p2pboost.transports.errors`). This module is the one
place that joins the two worlds, in the manner of httpx's transports:

* :func:`websocket_transport` builds the WebSocket + mutual TLS transport from a party's
  certificates (:class:`~p2pboost.certs.TLSConfig`): the TLS 1.3 contexts and the party id
  read from a peer certificate come from :mod:`p2pboost.certs`;
* :func:`translate_error` turns a transport's exception into p2pboost's
  (:class:`~p2pboost.exceptions.TransportError`, :class:`~p2pboost.exceptions.HandshakeError`,
  :class:`~p2pboost.exceptions.FrameTooLarge`), adding what only p2pboost knows: when a peer
  silently refused our certificate, what is wrong with it
  (:func:`~p2pboost.certs.certificate_problem`).

The node calls these where it builds its transport, listens, dials, sends and receives, so
nobody using a :class:`~p2pboost.net.node.Node` ever sees an exception of the transports.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from p2pboost import exceptions
from p2pboost.certs import (
    TLSConfig,
    certificate_problem,
    client_context,
    party_id_from_peercert,
    server_context,
)
from p2pboost.exceptions import ConfigError, InputError
from p2pboost.transports import errors
from p2pboost.transports.websocket import ErrorHook, WebSocketTransport

__all__ = ["load_tls", "peer_party_id", "translate_error", "websocket_transport"]


def load_tls(tls: TLSConfig | str | os.PathLike[str]) -> TLSConfig:
    """``tls`` itself, or the :class:`TLSConfig` of the directory ``p2pboost certs`` wrote."""
    if isinstance(tls, TLSConfig):
        return tls
    if not isinstance(tls, str | os.PathLike):
        raise ConfigError(f"tls must be a TLSConfig or a directory, not {type(tls).__name__}")
    return TLSConfig.from_dir(tls)


def peer_party_id(peercert: Mapping[str, Any]) -> str | None:
    """The party a verified peer certificate names, or ``None`` unless it names exactly one."""
    try:
        return party_id_from_peercert(peercert)
    except InputError:
        return None


def websocket_transport(
    tls: TLSConfig | str | os.PathLike[str],
    *,
    party_id: str | None = None,
    allowed_peers: Iterable[str] | None = None,
    on_error: ErrorHook | None = None,
    **options: Any,
) -> WebSocketTransport:
    """The WebSocket + mutual TLS 1.3 transport of the party whose certificates are ``tls``.

    ``tls`` is a :class:`~p2pboost.certs.TLSConfig` or the directory ``p2pboost certs init``
    wrote for the party. ``party_id`` (optional) is checked against the certificate, to catch
    mixed-up directories early. ``options`` are the other keyword arguments of
    :class:`~p2pboost.transports.websocket.WebSocketTransport` (limits, timeouts, keep-alive).
    Raises :class:`~p2pboost.exceptions.ConfigError` for unreadable certificates or bad options.
    """
    config = load_tls(tls)
    own_id = config.party_id
    if party_id is not None and party_id != own_id:
        raise ConfigError(
            f"the certificate {config.cert_file} is for party {own_id!r}, not {party_id!r}"
        )
    try:
        return WebSocketTransport(
            own_id,
            server_ssl=server_context(config),
            client_ssl=client_context(config),
            peer_id_from_cert=peer_party_id,
            allowed_peers=allowed_peers,
            on_error=on_error,
            **options,
        )
    except errors.TransportConfigError as exc:
        raise ConfigError(str(exc)) from None


def translate_error(
    exc: errors.TransportError, *, tls: TLSConfig | None = None
) -> exceptions.TransportError:
    """p2pboost's exception for a transport's ``exc`` (the same message; the class mapped).

    With ``tls`` (our own certificates), a handshake the peer ended by silently refusing our
    certificate also says what :func:`~p2pboost.certs.certificate_problem` finds wrong with it.
    """
    message = str(exc)
    if isinstance(exc, errors.HandshakeError):
        if exc.certificate_refused and tls is not None:
            problem = certificate_problem(tls)
            if problem:
                message = f"{message}; {problem}"
        return exceptions.HandshakeError(message)
    if isinstance(exc, errors.FrameTooLarge):
        return exceptions.FrameTooLarge(message)
    return exceptions.TransportError(message)
