"""placement-api's gunicorn worker closes idle kept-alive connections, but
never one whose next request has already arrived; it tells the arbiter it
is alive once a second at most."""

import collections
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
