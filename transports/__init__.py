"""Transports move authenticated byte messages between parties; see :mod:`transports.base`."""

from transports.base import Connection, ConnectionHandler, Listener, Transport

__all__ = ["Connection", "ConnectionHandler", "Listener", "Transport"]
