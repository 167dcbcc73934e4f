"""The gunicorn worker ``placement-api`` runs: gunicorn's threaded worker,
except that a connection gets a thread only once its whole request (head,
and a body of announced length up to ``[oslo_middleware]
max_request_body_size``) has arrived.

gunicorn's own threaded worker hands a connection to a thread as soon as
its first bytes arrive, and the thread then reads the rest blocking: a few
clients sending half a request header, or a body a byte at a time, hold
every thread of every worker. Here the worker's event loop (the one that
already accepts connections and waits on kept-alive ones) reads requests
without blocking; slow or idle connections cost a socket and a buffer, not
a thread. A connection whose request head has not arrived within
``HEAD_TIMEOUT`` seconds is closed; one whose body has not arrived within
``BODY_TIMEOUT`` after its head is answered 408 (``LATE_BODY``) and
closed. Bodies sent without ``Content-Length``
(chunked) are not read ahead: the app never reads them, and gunicorn
drains them within its own bound. With TLS (not something placement-api
sets up) gunicorn's own behaviour is kept.

It also never closes an idle kept-alive connection whose next request has
already arrived (see ``murder_keepalived``), touches the arbiter's
heartbeat once a second at most (``notify``), and sends a response's head
and its first piece of body in one write (``_OneWrite``).
"""

import errno
import itertools
import re
import selectors
import socket
import time
from functools import partial

from gunicorn.workers import gthread

from placement.web import errors

# How long a client may take to send a request head, and then its body.
HEAD_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
# The answer to a body late by BODY_TIMEOUT (granian's too: cmd/rsgi).
LATE_BODY = errors.server_answer(
    408, "The request body did not arrive within %d seconds." % BODY_TIMEOUT
)
_LATE_BODY_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    % (len(LATE_BODY), LATE_BODY)
)
# Larger than any head gunicorn accepts with its default limits (request
# line 4094, 100 fields of 8190): such a head goes to the parser, which
# answers its usual error.
MAX_HEAD = 4094 + 100 * 8190
_CONTENT_LENGTH = re.compile(rb"\r?\ncontent-length[ \t]*:[ \t]*(\d+)[ \t]*\r?\n", re.I)
_HEAD_END = re.compile(rb"\r?\n\r?\n")


class _Reading:
    """A request being read ahead of dispatch."""

    def __init__(self):
        self.data = bytearray()
        self.wanted = None  # total bytes (head + body), once the head is in


class HeadFirstWorker(gthread.ThreadWorker):
    # The heartbeat the arbiter watches is a file's times (a syscall), which
    # gunicorn sets on every turn of the event loop, several per request;
    # once a second is plenty against a timeout of many seconds.
    NOTIFY_EVERY = 1.0
    _notified = -NOTIFY_EVERY

    def notify(self):
        now = time.monotonic()
        if now - self._notified >= self.NOTIFY_EVERY:
            self._notified = now
            super().notify()

    def init_process(self):
        # self.app: placement-api's gunicorn application (cmd/api.Server).
        self.body_limit = self.app.conf.oslo_middleware.max_request_body_size
        super().init_process()

    def accept(self, listener):
        if self.cfg.is_ssl:
            return super().accept(listener)
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = gthread.TConn(self.cfg, client_sock, client_addr, listener.getsockname())
        self._read_ahead(conn)

    def on_client_socket_readable(self, conn, client):
        if self.cfg.is_ssl:
            return super().on_client_socket_readable(conn, client)
        # A kept-alive connection's next request is read ahead too.
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._read_ahead(conn)

    def _read_ahead(self, conn):
        conn.sock.setblocking(False)
        conn.reading = _Reading()
        # murder_pending() closes what is still here after conn.timeout.
        conn.timeout = time.monotonic() + HEAD_TIMEOUT
        self.pending_conns.append(conn)
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn)
        )

    def _on_readable(self, conn, client):
        reading = conn.reading
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        reading.data += chunk
        if reading.wanted is None:
            end = _HEAD_END.search(reading.data)
            if end is None:
                if len(reading.data) > MAX_HEAD:
                    self._dispatch(conn)
                return
            head = bytes(reading.data[: end.end()])
            length = _CONTENT_LENGTH.search(head)
            length = int(length.group(1)) if length else 0
            if length > self.body_limit:
                # Answered 413 unread.
                self._dispatch(conn)
                return
            reading.wanted = end.end() + length
            conn.timeout = time.monotonic() + BODY_TIMEOUT
        if len(reading.data) >= reading.wanted:
            self._dispatch(conn)

    def _dispatch(self, conn):
        self.poller.unregister(conn.sock)
        self.pending_conns.remove(conn)
        conn.data_ready = True
        self.enqueue_req(conn)

    def _drop(self, conn):
        self.poller.unregister(conn.sock)
        self.pending_conns.remove(conn)
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self):
        # Deadlines move when a head is in, so the deque is not in deadline
        # order (gunicorn's version stops at the first live one): look at
        # all of them, at most worker_connections, once a second.
        now = time.monotonic()
        for conn in [c for c in self.pending_conns if c.timeout <= now]:
            if conn.reading.wanted is not None:
                # The head is in, the body late.
                try:
                    conn.sock.send(_LATE_BODY_ANSWER)
                except OSError:
                    pass
            self._drop(conn)

    def murder_keepalived(self, force=False):
        # A request can arrive on a kept-alive connection after the poller
        # looked and before its idle time is checked here. gunicorn closes
        # it anyway, and closing a socket with unread data resets the
        # connection: the client's request fails though it was sent in
        # time (clients that reuse connections on a period close to the
        # keep-alive timeout saw this). Such a connection is left to the
        # poller, which dispatches its request on its next round.
        spared = []
        if not (force or self.cfg.is_ssl):
            now = time.monotonic()
            spared = [
                conn
                for conn in itertools.takewhile(
                    lambda conn: conn.timeout <= now, self.keepalived_conns
                )
                if _has_data(conn.sock)
            ]
            for conn in spared:
                self.keepalived_conns.remove(conn)
        super().murder_keepalived(force)
        self.keepalived_conns.extendleft(reversed(spared))

    def handle_request(self, req, conn):
        if self.cfg.is_ssl:
            return super().handle_request(req, conn)
        sock = conn.sock
        conn.sock = joined = _OneWrite(sock)
        try:
            return super().handle_request(req, conn)
        finally:
            conn.sock = sock
            joined.flush()

    def handle(self, conn):
        reading = getattr(conn, "reading", None)
        if reading is not None:
            conn.reading = None
            conn.sock.setblocking(True)
            conn.init()
            if not conn.is_http2:
                conn.parser.unreader.unread(bytes(reading.data))
        return super().handle(conn)


def _has_data(sock):
    """True when a non-blocking socket has bytes to read (not EOF)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except OSError:  # nothing yet (EAGAIN), or the peer reset it
        return False


class _OneWrite:
    """A connection's socket for one response: gunicorn sends the head and
    then each piece of body with a ``sendall`` of its own; the head is held
    and sent with the first piece (a falcon answer is one piece), one
    system call and one TCP segment where there were two. Whatever is
    still held goes at ``flush`` (a response with no body)."""

    def __init__(self, sock):
        self._sock = sock
        self._held = None  # None until gunicorn's first write, the head

    def sendall(self, data):
        if self._held is None:
            self._held = bytes(data)
            return
        data, self._held = self._held + data, b""
        self._sock.sendall(data)

    def sendfile(self, *args, **kwargs):
        self.flush()
        return self._sock.sendfile(*args, **kwargs)

    def flush(self):
        held, self._held = self._held, b""
        if held:
            self._sock.sendall(held)

    def __getattr__(self, name):
        return getattr(self._sock, name)
