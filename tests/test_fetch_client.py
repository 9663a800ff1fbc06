"""`bench fetch`'s client (make overload's large file): the answer's start
may take as long as the path may hold it (START_S), a stall after the start
is a client timeout, each against a real socket that holds its answer."""
import hashlib
import socket
import threading
import time

import pytest

from bench.clients.fetch import download

BODY = b"x" * 100_000
SHA256 = hashlib.sha256(BODY).hexdigest()
HOLD_S = 1.0
SHORT_S = 0.2  # a fifth of the hold: it runs out first however slow the machine


@pytest.fixture
def holding_server():
    """A server that reads one request, holds its status line hold_start
    seconds, sends a part of the body, holds the rest hold_body seconds."""
    servers = []

    def start(hold_start: float, hold_body: float) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        servers.append(listener)

        def answer():
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                time.sleep(hold_start)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                             % len(BODY) + BODY[:1000])
                time.sleep(hold_body)
                try:
                    conn.sendall(BODY[1000:])
                except OSError:
                    pass  # the client gave up

        threading.Thread(target=answer, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}/files/f.bin"

    yield start
    for listener in servers:
        listener.close()


def test_an_answer_held_in_line_within_its_start_bound_comes_whole(holding_server):
    url = holding_server(HOLD_S, 0)
    assert download(url, SHA256, start_s=10 * HOLD_S, read_s=SHORT_S) == "whole"


def test_an_answer_that_starts_too_late_is_a_client_timeout(holding_server):
    url = holding_server(HOLD_S, 0)
    assert download(url, SHA256, start_s=SHORT_S, read_s=10 * HOLD_S) == "client timeout"


def test_a_stall_after_the_start_is_a_client_timeout_whatever_the_start_bound(holding_server):
    url = holding_server(0, HOLD_S)
    assert download(url, SHA256, start_s=10 * HOLD_S, read_s=SHORT_S) == "client timeout"
