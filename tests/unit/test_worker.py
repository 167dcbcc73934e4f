"""placement-api's gunicorn worker closes idle kept-alive connections, but
never one whose next request has already arrived; it tells the arbiter it
is alive once a second at most."""

import collections
import io
import selectors
import socket
import time
import types

from placement.cmd import worker


class Conn:
    def __init__(self, sock, timeout):
        self.sock, self.timeout = sock, timeout

    def close(self):
        self.sock.close()


def _kept_alive(idle_for):
    """A kept-alive server-side connection idle for ``idle_for`` seconds
    past its timeout (negative: before it), and the client's end."""
    server, client = socket.socketpair()
    server.setblocking(False)
    return Conn(server, time.monotonic() - idle_for), client


def _worker(conns):
    self = worker.HeadFirstWorker.__new__(worker.HeadFirstWorker)
    self.cfg = types.SimpleNamespace(is_ssl=False)
    self.poller = selectors.DefaultSelector()
    self.keepalived_conns = collections.deque(conns)
    self.nr_conns = len(conns)
    for conn in conns:
        self.poller.register(conn.sock, selectors.EVENT_READ)
    return self


def test_an_expired_connection_whose_request_arrived_is_not_closed():
    idle, idle_client = _kept_alive(1.0)
    asking, asking_client = _kept_alive(0.5)
    fresh, fresh_client = _kept_alive(-1.0)
    asking_client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    gone, gone_client = _kept_alive(0.2)
    gone_client.close()
    self = _worker([idle, asking, gone, fresh])

    self.murder_keepalived()

    assert list(self.keepalived_conns) == [asking, fresh]
    assert self.nr_conns == 2
    # The idle client sees an orderly close, not a reset; the asking one's
    # request is still there to be read.
    assert idle_client.recv(1) == b""
    assert asking.sock.recv(100).startswith(b"GET / ")
    assert self.poller.get_map().keys() == {asking.sock.fileno(), fresh.sock.fileno()}
    for sock in (idle_client, asking_client, fresh_client, asking.sock, fresh.sock):
        sock.close()


def test_a_stopping_worker_closes_every_connection():
    asking, asking_client = _kept_alive(0.5)
    asking_client.sendall(b"GET / HTTP/1.1\r\n")
    self = _worker([asking])
    self.murder_keepalived(force=True)
    assert not self.keepalived_conns and self.nr_conns == 0
    asking_client.close()


def test_the_heartbeat_is_touched_once_a_second_at_most():
    touched = []
    self = worker.HeadFirstWorker.__new__(worker.HeadFirstWorker)
    self.tmp = types.SimpleNamespace(notify=lambda: touched.append(time.monotonic()))

    for _ in range(100):
        self.notify()
    assert len(touched) == 1
    self._notified -= worker.HeadFirstWorker.NOTIFY_EVERY
    self.notify()
    assert len(touched) == 2


class Recording:
    """A socket that records each sendall (and each sendfile's file)."""

    def __init__(self):
        self.writes = []

    def sendall(self, data):
        self.writes.append(bytes(data))

    def sendfile(self, file, offset=0, count=None):
        self.writes.append(file.read())


def _respond(monkeypatch, status, body_pieces, method="GET"):
    """The writes of one response made by gunicorn's own Response through
    the worker's handle_request."""
    from gunicorn.http import wsgi
    from gunicorn.workers import gthread

    def gunicorn_handle_request(self, req, conn):
        resp = wsgi.Response(req, conn.sock, self.cfg)
        resp.start_response(
            status, [("Content-Length", str(sum(map(len, body_pieces))))]
        )
        for piece in body_pieces:
            resp.write(piece)
        resp.close()
        return True

    monkeypatch.setattr(gthread.ThreadWorker, "handle_request", gunicorn_handle_request)
    self = worker.HeadFirstWorker.__new__(worker.HeadFirstWorker)
    self.cfg = types.SimpleNamespace(is_ssl=False)
    sock = Recording()
    conn = types.SimpleNamespace(sock=sock)
    req = types.SimpleNamespace(
        version=(1, 1), method=method, should_close=lambda: False, headers=[]
    )
    assert self.handle_request(req, conn) is True
    assert conn.sock is sock
    return sock.writes


def test_a_response_head_and_body_go_in_one_write(monkeypatch):
    writes = _respond(monkeypatch, "200 OK", [b'{"versions": []}'])
    assert len(writes) == 1
    head, body = writes[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 16" in head
    assert body == b'{"versions": []}'


def test_later_pieces_and_bodiless_answers_are_still_sent(monkeypatch):
    writes = _respond(monkeypatch, "200 OK", [b"ab", b"cd"])
    assert len(writes) == 2
    assert writes[0].endswith(b"\r\n\r\nab") and writes[1] == b"cd"
    writes = _respond(monkeypatch, "204 No Content", [])
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 204 No Content\r\n")
    assert writes[0].endswith(b"\r\n\r\n")


def test_a_file_body_goes_after_the_head():
    sock = Recording()
    joined = worker._OneWrite(sock)
    joined.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    joined.sendfile(io.BytesIO(b"file body"))
    joined.flush()
    assert sock.writes == [b"HTTP/1.1 200 OK\r\n\r\n", b"file body"]
