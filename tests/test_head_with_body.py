"""gevent_worker's ProgressTimedSocket on real (gevent) sockets: gunicorn's
head, its first write, is held and goes out with the body's first piece
(issue 39: one send where there were two, for every answer and refusal);
a response without a body sends it at the request's end (flush), anything
else done with the socket sends it first; a piece larger than the socket's
buffers still arrives whole, in order, after the head; and the send
timeout still cuts a client that takes nothing."""
import socket

import gevent
import pytest
from gevent import socket as gsocket

from gevent_worker import HELD_HEAD_BYTES, ProgressTimedSocket

HEAD = b"HTTP/1.1 503 SERVICE UNAVAILABLE\r\nContent-Length: 12\r\n\r\n"
BODY = b"server busy\n"


@pytest.fixture
def pair():
    server, client = gsocket.socketpair()
    yield server, client
    server.close()
    client.close()


def waiting(client) -> bytes:
    """What the client can read now, without waiting."""
    client.settimeout(0)
    try:
        return client.recv(1 << 20)
    except BlockingIOError:
        return b""
    finally:
        client.settimeout(None)


def read_all(client, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = client.recv(1 << 20)
        if not piece:
            break
        data += piece
    return data


def test_the_head_goes_out_with_the_first_piece_of_the_body(pair):
    server, client = pair
    timed = ProgressTimedSocket(server)
    timed.sendall(HEAD)
    assert waiting(client) == b""
    timed.sendall(BODY)
    assert read_all(client, len(HEAD + BODY)) == HEAD + BODY
    timed.sendall(b"more")  # later writes go out as they come
    assert waiting(client) == b"more"


def test_a_piece_larger_than_the_socket_buffers_follows_the_head_whole(pair):
    server, client = pair
    body = bytes(range(256)) * (16 * 4096)  # 16 MiB: many partial sends
    timed = ProgressTimedSocket(server)
    timed.sendall(HEAD)
    assert waiting(client) == b""
    reader = gevent.spawn(read_all, client, len(HEAD) + len(body))
    timed.sendall(body)
    assert reader.get(timeout=30) == HEAD + body


def test_a_head_without_a_body_goes_at_the_end_or_before_any_other_use_of_the_socket(pair):
    server, client = pair
    timed = ProgressTimedSocket(server)
    timed.sendall(HEAD)
    assert waiting(client) == b""
    timed.flush()
    assert read_all(client, len(HEAD)) == HEAD
    timed.flush()  # nothing twice
    assert waiting(client) == b""

    again = ProgressTimedSocket(server)
    again.sendall(HEAD)
    assert waiting(client) == b""
    again.shutdown(socket.SHUT_WR)  # gunicorn cutting an answer: the head first
    assert read_all(client, len(HEAD) + 1) == HEAD


def test_a_first_write_larger_than_a_head_is_not_held(pair):
    server, client = pair
    timed = ProgressTimedSocket(server)
    timed.sendall(b"x" * (HELD_HEAD_BYTES + 1))
    assert waiting(client).startswith(b"x")


def test_a_client_that_takes_nothing_is_still_cut_by_the_send_timeout(pair):
    server, client = pair
    server.settimeout(0.2)
    timed = ProgressTimedSocket(server)
    timed.sendall(HEAD)
    assert waiting(client) == b""
    with pytest.raises(TimeoutError):
        timed.sendall(b"x" * (64 << 20))
