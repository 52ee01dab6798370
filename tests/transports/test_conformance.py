"""The transport contract (:mod:`p2pboost.transports.base`), checked on every transport alike."""

from __future__ import annotations

import asyncio
import os

import pytest

from p2pboost.transports.base import Connection
from p2pboost.transports.errors import (
    FrameTooLarge,
    HandshakeError,
    TransportError,
    TransportUsageError,
)

from .conftest import Harness

LIMIT = 1 << 20


async def test_connect_verifies_both_party_ids(harness: Harness) -> None:
    async with harness.pair() as (client, server):
        assert client.peer_id == "host1"
        assert server.peer_id == "guest"
        assert not client.closed
        assert not server.closed


async def test_connecting_to_another_party_than_expected_is_refused(harness: Harness) -> None:
    errors: list[Exception] = []
    async with harness.server("host1", on_error=errors.append) as (listener, accepted):
        with pytest.raises(HandshakeError, match=r"'host1'.*'host2'|'host2'.*'host1'"):
            await harness.transport("guest").connect(listener.address, peer_id="host2")
        await asyncio.sleep(0.05)
        assert accepted.empty()  # the handler never saw it...
        assert errors == []  # ...nor did the server: the client checked before asking


async def test_party_outside_allowed_peers_is_refused_on_both_sides(harness: Harness) -> None:
    errors: list[Exception] = []
    async with harness.server("host1", allowed_peers={"host2"}, on_error=errors.append) as (
        listener,
        accepted,
    ):
        with pytest.raises(HandshakeError, match=r"not .*allowed"):
            await harness.transport("guest").connect(listener.address, peer_id="host1")
        assert len(errors) == 1
        assert isinstance(errors[0], HandshakeError)
        assert "'guest' is not" in str(errors[0])
        # The listener keeps serving the parties it allows.
        ok = await harness.transport("host2").connect(listener.address, peer_id="host1")
        server = await asyncio.wait_for(accepted.get(), 5)
        assert server.peer_id == "host2"
        await ok.close()


async def test_messages_arrive_whole_and_in_order_both_ways(harness: Harness) -> None:
    messages = [os.urandom(n) for n in (0, 1, 7, 1000, 65_536, 300_000) * 20]

    async def pump(sender: Connection, receiver: Connection) -> list[bytes]:
        async def send_all() -> None:
            for message in messages:
                await sender.send(message)

        sending = asyncio.create_task(send_all())
        received = [await receiver.receive() for _ in messages]
        await sending
        return received

    async with harness.pair() as (client, server):
        up, down = await asyncio.gather(pump(client, server), pump(server, client))
    assert up == messages
    assert down == messages


async def test_message_at_the_limit_is_delivered(harness: Harness) -> None:
    message = os.urandom(LIMIT)
    async with harness.pair(
        max_message_bytes=LIMIT, server_kwargs={"max_message_bytes": LIMIT}
    ) as (
        client,
        server,
    ):
        await client.send(message)
        assert await server.receive() == message


async def test_oversize_message_is_refused_locally_and_the_link_stays_up(
    harness: Harness,
) -> None:
    async with harness.pair(max_message_bytes=LIMIT) as (client, server):
        with pytest.raises(FrameTooLarge, match="exceeds the limit"):
            await client.send(bytes(LIMIT + 1))
        await client.send(b"still here")
        assert await server.receive() == b"still here"


async def test_receiver_with_a_smaller_limit_closes_the_link(harness: Harness) -> None:
    async with harness.pair(max_message_bytes=LIMIT, server_kwargs={"max_message_bytes": 1000}) as (
        client,
        server,
    ):
        try:
            await client.send(bytes(5000))
        except TransportError:
            pass  # the memory transport knows at once; a socket learns on its next operation
        with pytest.raises(FrameTooLarge):
            await server.receive()
        with pytest.raises(TransportError):
            await client.receive()


async def test_close_is_idempotent_and_fails_later_operations(harness: Harness) -> None:
    async with harness.pair() as (client, _server):
        await client.close()
        await client.close()
        assert client.closed
        with pytest.raises(TransportError):
            await client.receive()
        with pytest.raises(TransportError):
            await client.send(b"x")


async def test_receive_after_peer_close_drains_then_raises(harness: Harness) -> None:
    async with harness.pair() as (client, server):
        await client.send(b"one")
        await client.send(b"two")
        await client.close()
        assert await server.receive() == b"one"
        assert await server.receive() == b"two"
        with pytest.raises(TransportError, match="closed"):
            await server.receive()
        assert server.closed
        with pytest.raises(TransportError):
            await server.send(b"too late")


async def test_a_waiting_receive_fails_when_the_peer_closes(harness: Harness) -> None:
    async with harness.pair() as (client, server):
        waiting = asyncio.create_task(server.receive())
        await asyncio.sleep(0.01)
        await client.close()
        with pytest.raises(TransportError):
            await asyncio.wait_for(waiting, 5)


async def test_only_one_receive_at_a_time(harness: Harness) -> None:
    async with harness.pair() as (client, server):
        first = asyncio.create_task(server.receive())
        await asyncio.sleep(0.01)
        with pytest.raises(TransportUsageError, match="another receive"):
            await server.receive()
        await client.send(b"for the first")
        assert await asyncio.wait_for(first, 5) == b"for the first"


async def test_many_concurrent_connections(harness: Harness) -> None:
    count = 24
    async with harness.server("host1") as (listener, accepted):

        async def echo_all() -> None:
            for _ in range(count):
                connection = await accepted.get()
                await connection.send(await connection.receive())

        echo = asyncio.create_task(echo_all())
        clients = await asyncio.gather(
            *(
                harness.transport(party).connect(listener.address, peer_id="host1")
                for party in ["guest", "host2"] * (count // 2)
            )
        )

        async def roundtrip(i: int, connection: Connection) -> bytes:
            await connection.send(b"%d" % i)
            return await connection.receive()

        replies = await asyncio.gather(*(roundtrip(i, c) for i, c in enumerate(clients)))
        await asyncio.wait_for(echo, 5)
        assert replies == [b"%d" % i for i in range(count)]
        await asyncio.gather(*(c.close() for c in clients))


async def test_send_waits_while_the_peer_does_not_read(harness: Harness) -> None:
    chunk = bytes(256 * 1024)
    most = 400  # 100 MiB: far beyond any buffer between the two ends
    sent = 0
    async with harness.pair() as (client, server):

        async def flood() -> None:
            nonlocal sent
            for _ in range(most):
                await client.send(chunk)
                sent += 1
            await client.send(b"last")

        flooding = asyncio.create_task(flood())
        # Wait until the sender stops making progress: blocked, not just slow.
        deadline = asyncio.get_running_loop().time() + 10
        last = -1
        while sent != last and not flooding.done():
            last = sent
            await asyncio.sleep(0.2)
            assert asyncio.get_running_loop().time() < deadline
        assert not flooding.done(), "every send completed although nobody reads"
        assert sent < most
        # Reading releases the sender: it is back-pressure, not a dead link.
        received = 0
        while await server.receive() != b"last":
            received += 1
        await asyncio.wait_for(flooding, 10)
        assert received == most


async def test_server_keeps_serving_after_a_bad_client(harness: Harness) -> None:
    errors: list[Exception] = []
    async with harness.server("host1", allowed_peers={"guest"}, on_error=errors.append) as (
        listener,
        accepted,
    ):
        await bad_client(harness, listener.address)
        assert errors, "the server must report the refused client"
        client = await harness.transport("guest").connect(listener.address, peer_id="host1")
        server = await asyncio.wait_for(accepted.get(), 5)
        await client.send(b"hello")
        assert await server.receive() == b"hello"
        await client.close()


async def bad_client(harness: Harness, address: str) -> None:
    """A client the server must refuse: garbage on a socket, or a party it does not allow."""
    if harness.kind == "websocket":
        host, port = address.removeprefix("wss://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")  # no TLS at all
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # dropped without a word
        finally:
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(0.05)
    else:
        with pytest.raises(HandshakeError):
            await harness.transport("host2").connect(address, peer_id="host1")
