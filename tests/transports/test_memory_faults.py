"""Fault injection in the in-memory network: latency, drops, cuts mid-message, refusals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

import pytest

from p2pboost.testing import time_factor
from p2pboost.transports.base import Connection
from p2pboost.transports.errors import FrameTooLarge, HandshakeError, TransportError
from p2pboost.transports.memory import MemoryConnection, MemoryNetwork, MemoryTransport


@asynccontextmanager
async def linked(
    network: MemoryNetwork, max_message_bytes: int = 1 << 20
) -> AsyncIterator[tuple[MemoryConnection, MemoryConnection, str]]:
    accepted: asyncio.Queue[Connection] = asyncio.Queue()
    stop = asyncio.Event()

    async def handler(connection: Connection) -> None:
        await accepted.put(connection)
        await stop.wait()

    server_transport = MemoryTransport(network, "host1", max_message_bytes=max_message_bytes)
    listener = await server_transport.serve("mem://host1", handler)
    client = await MemoryTransport(network, "guest").connect("mem://host1", peer_id="host1")
    server = await accepted.get()
    assert isinstance(server, MemoryConnection)
    try:
        yield client, server, listener.address
    finally:
        stop.set()
        await listener.close()


async def elapsed(operation: Awaitable[object]) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await operation
    return loop.time() - start


async def test_network_delay_applies_to_every_message() -> None:
    network = MemoryNetwork(delay=0.05)
    async with linked(network) as (client, server, _):
        await client.send(b"a")
        assert await elapsed(server.receive()) >= 0.04
        network.delay = 0.0
        await client.send(b"b")
        assert await elapsed(server.receive()) < 0.04 * time_factor()


async def test_connection_delay_is_one_direction_and_keeps_order() -> None:
    async with linked(MemoryNetwork()) as (client, server, _):
        client.delay = 0.05
        for i in range(5):
            await client.send(b"%d" % i)
        received = [await server.receive() for _ in range(5)]
        assert received == [b"0", b"1", b"2", b"3", b"4"]
        await server.send(b"back")
        assert await elapsed(client.receive()) < 0.04 * time_factor()


async def test_drop_fails_both_ends_and_loses_buffered_messages() -> None:
    network = MemoryNetwork()
    async with linked(network) as (client, server, _):
        waiting = asyncio.create_task(client.receive())
        await server.send(b"buffered")
        await client.send(b"also buffered")
        await asyncio.sleep(0)
        assert await waiting == b"buffered"
        client.drop("cable cut")
        assert client.closed
        assert server.closed
        for end in (client, server):
            with pytest.raises(TransportError, match="cable cut"):
                await end.receive()
            with pytest.raises(TransportError, match="cable cut"):
                await end.send(b"x")
        assert network.connections() == []


async def test_a_message_in_flight_is_lost_when_the_link_drops() -> None:
    async with linked(MemoryNetwork()) as (client, server, _):
        client.delay = 1.0
        await client.send(b"in flight")
        receiving = asyncio.create_task(server.receive())
        await asyncio.sleep(0.05)
        server.drop()
        with pytest.raises(TransportError):
            await receiving


@pytest.mark.parametrize("sender_notices", [True, False])
async def test_drop_after_cuts_the_link_mid_message(sender_notices: bool) -> None:
    async with linked(MemoryNetwork()) as (client, server, _):
        client.drop_after(3, sender_notices=sender_notices)
        await client.send(b"1")
        await client.send(b"2")
        if sender_notices:
            with pytest.raises(TransportError, match="while a message was being sent"):
                await client.send(b"3")
        else:
            await client.send(b"3")  # left the sender, lost on the wire
        # Messages before the cut were also in the buffer: a broken link loses them too, so
        # the receiver sees none of "3" (never partially, never twice) and then the failure.
        with pytest.raises(TransportError):
            await server.receive()
        with pytest.raises(TransportError):
            await client.send(b"4")


async def test_drop_after_delivers_what_was_read_before_the_cut() -> None:
    async with linked(MemoryNetwork()) as (client, server, _):
        client.drop_after(2)
        await client.send(b"1")
        assert await server.receive() == b"1"
        with pytest.raises(TransportError):
            await client.send(b"2")
        with pytest.raises(TransportError):
            await server.receive()


async def test_drop_all_is_a_network_outage() -> None:
    network = MemoryNetwork()
    async with linked(network) as (client, server, _):
        other = await MemoryTransport(network, "host2").connect("mem://host1", peer_id="host1")
        assert len(network.connections("host1")) == 2
        network.drop_all()
        assert client.closed
        assert server.closed
        assert other.closed
        assert network.connections() == []


async def test_refuse_for_a_while_then_accept_again() -> None:
    network = MemoryNetwork()
    async with linked(network) as (_client, _server, address):
        guest = MemoryTransport(network, "guest")
        network.refuse(address, seconds=0.1)
        with pytest.raises(TransportError, match="refused") as caught:
            await guest.connect(address, peer_id="host1")
        assert not isinstance(caught.value, HandshakeError)
        await asyncio.sleep(0.12)
        await (await guest.connect(address, peer_id="host1")).close()
        network.refuse(address)
        with pytest.raises(TransportError):
            await guest.connect(address, peer_id="host1")
        network.accept(address)
        await (await guest.connect(address, peer_id="host1")).close()


async def test_nobody_listening_and_address_in_use() -> None:
    network = MemoryNetwork()
    guest = MemoryTransport(network, "guest")
    with pytest.raises(TransportError, match="connection refused"):
        await guest.connect("mem://nobody", peer_id="host1")

    async def handler(connection: Connection) -> None:
        pass

    host = MemoryTransport(network, "host1")
    first = await host.serve("mem://host1:0", handler)
    second = await host.serve("mem://host1:0", handler)
    assert first.address != second.address
    with pytest.raises(TransportError, match="already in use"):
        await host.serve(first.address, handler)
    await first.close()
    await first.close()
    await second.close()
    with pytest.raises(TransportError):
        await guest.connect(first.address, peer_id="host1")


async def test_listener_close_closes_accepted_connections() -> None:
    network = MemoryNetwork()
    async with linked(network) as (client, _server, _):
        pass
    with pytest.raises(TransportError):
        await client.receive()


async def test_handler_failure_is_reported_and_the_connection_closed() -> None:
    network = MemoryNetwork()
    errors: list[Exception] = []

    async def broken(connection: Connection) -> None:
        raise RuntimeError("boom")

    listener = await MemoryTransport(network, "host1", on_error=errors.append).serve(
        "mem://h", broken
    )
    client = await MemoryTransport(network, "guest").connect("mem://h", peer_id="host1")
    with pytest.raises(TransportError, match="closed"):
        await client.receive()
    assert "RuntimeError('boom')" in str(errors[0])
    await listener.close()


async def test_receiver_limit_smaller_than_sender_limit() -> None:
    async with linked(MemoryNetwork(), max_message_bytes=10) as (client, server, _):
        with pytest.raises(TransportError, match="refused a message of 11 bytes"):
            await client.send(bytes(11))
        with pytest.raises(FrameTooLarge, match="over the limit of 10"):
            await server.receive()


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        MemoryTransport(MemoryNetwork(), "a", queue_size=0)
