"""Slow and idle connections must not deny service: with 200 connections
trickling partial request heads and 200 idle ones open for 40 s, every
normal request to a real ``placement-api`` is answered, and many are
before the server drops its first attacking connection (a worker whose
threads the attack held would answer none until then).
"""

import json
import socket
import threading
import time

import requests

from tests.functional import live_server

ATTACK_SECONDS = 40
TRICKLING = 200
IDLE = 200
# The server drops an attacking connection whose head is 10 s late
# (cmd/worker.HEAD_TIMEOUT, cmd/granian_server.HEAD_TIMEOUT_MS). Probes
# start 2 s into the attack and one takes milliseconds: a server whose
# threads the attack cannot hold answers many before its first drop, one
# whose threads it holds none.
# PROBE_TIMEOUT only bounds how long a probe may wait at all.
PROBE_TIMEOUT = 120.0
SERVED_BEFORE_A_DROP = 10
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


class Attack:
    """Keeps ``TRICKLING`` connections sending a request head a line at a
    time (never finishing it) and ``IDLE`` connections silent, reopening
    any the server closes, until stopped."""

    def __init__(self, port, events):
        self.port = port
        self.events = events  # "dropped" when the server closed one
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _open(self, trickle):
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            return None
        sock.setblocking(False)
        if trickle:
            self._send(sock, b"GET /resource_providers HTTP/1.1\r\nHost: x\r\n")
        return sock

    @staticmethod
    def _send(sock, data):
        try:
            sock.send(data)
            return True
        except OSError:
            return False

    @staticmethod
    def _closed(sock):
        try:
            return sock.recv(1024) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _run(self):
        trickling = [self._open(True) for _ in range(TRICKLING)]
        idle = [self._open(False) for _ in range(IDLE)]
        line = 0
        while not self.stop.wait(0.5):
            line += 1
            for group, trickle in ((trickling, True), (idle, False)):
                for i, sock in enumerate(group):
                    alive = sock is not None and not self._closed(sock)
                    if alive and trickle:
                        alive = self._send(sock, b"X-Slow-%d: x\r\n" % line)
                    if not alive:
                        if sock is not None:
                            self.events.append("dropped")
                            sock.close()
                        group[i] = self._open(trickle)
        for sock in trickling + idle:
            if sock is not None:
                sock.close()


def _probe(url, events, stop):
    """Normal requests one after another, each answer's outcome appended
    to ``events`` ("served" for a 200, else "failed")."""
    session = requests.Session()
    while not stop.is_set():
        try:
            response = session.get(
                url + "/resource_providers", headers=HEADERS, timeout=PROBE_TIMEOUT
            )
            ok = response.status_code == 200
        except requests.RequestException:
            ok = False
            session = requests.Session()
        events.append("served" if ok else "failed")
        time.sleep(0.1)


def test_slow_and_idle_connections_do_not_deny_service(tmp_path, api_server):
    events = []  # in the order they happened, from every thread
    with live_server.placement_api(
        str(tmp_path), "--workers", "2", "--threads", "4", server=api_server
    ) as url:
        attack = Attack(int(url.rsplit(":", 1)[1]), events)
        attack.thread.start()
        stop = threading.Event()
        probes = [
            threading.Thread(target=_probe, args=(url, events, stop)) for _ in range(2)
        ]
        try:
            time.sleep(2)  # every attacking connection is open
            for probe in probes:
                probe.start()
            time.sleep(ATTACK_SECONDS - 2)
        finally:
            stop.set()
            for probe in probes:
                probe.join()
            attack.stop.set()
            attack.thread.join()
    assert "failed" not in events
    assert "dropped" in events  # the attack lasted past the head timeout
    before = events[: events.index("dropped")]
    assert before.count("served") >= SERVED_BEFORE_A_DROP, before


def test_slow_bodies_do_not_take_the_workers_turns(tmp_path, api_server):
    """Two clients send a request head and the first bytes of its body,
    then wait: a normal request to the same worker (one worker, two
    requests executed at once) is answered meanwhile (under granian the
    bodies hold threads, not the gate's turns). Then the rest of each
    body arrives, and each request is answered in full."""
    with live_server.placement_api(
        str(tmp_path),
        "--workers",
        "1",
        "--threads",
        "4",
        "--active",
        "2",
        server=api_server,
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        bodies = [b'{"name": "slow-%d"}' % i for i in range(2)]
        slow = []
        for body in bodies:
            sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT)
            sock.sendall(
                b"POST /resource_providers HTTP/1.1\r\nHost: x\r\n"
                b"x-auth-token: admin\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body[:5])
            )
            slow.append(sock)
        time.sleep(1)  # the server has the heads and the first bytes
        probe = requests.get(
            url + "/resource_providers", headers=HEADERS, timeout=PROBE_TIMEOUT
        )
        answers = []
        for sock, body in zip(slow, bodies):
            with sock:
                sock.sendall(body[5:])
                answers.append(_read_to_end(sock))
    assert probe.status_code == 200
    assert probe.json()["resource_providers"] == []
    for answer in answers:
        # Created, at the default microversion 1.0.
        assert answer.startswith(b"HTTP/1.1 201 "), answer[:300]


def test_late_bodies_hold_no_thread_and_are_answered_408(tmp_path, api_server):
    """Ten clients each send a request head and 1 byte of a 100-byte body,
    then nothing more: a normal request to the same worker (one worker,
    four threads) is answered meanwhile, and each late one is answered a
    408 with the API's JSON error document once its body is 30 s late
    (cmd/worker.BODY_TIMEOUT, which cmd/rsgi shares), and closed."""
    with live_server.placement_api(
        str(tmp_path), "--workers", "1", "--threads", "4", server=api_server
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        late = []
        for _ in range(10):
            sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT)
            sock.sendall(
                b"POST /resource_providers HTTP/1.1\r\nHost: x\r\n"
                b"x-auth-token: admin\r\ncontent-type: application/json\r\n"
                b"content-length: 100\r\n\r\n{"
            )
            late.append(sock)
        time.sleep(1)  # the server has the heads and the first bytes
        probe = requests.get(
            url + "/resource_providers", headers=HEADERS, timeout=PROBE_TIMEOUT
        )
        answers = []
        for sock in late:
            with sock:
                answers.append(_read_to_end(sock))
    assert probe.status_code == 200
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer[:300]
        assert b"application/json" in head.lower()
        (error,) = json.loads(body)["errors"]
        assert error["status"] == 408
        assert "did not arrive within 30 seconds" in error["detail"]


def _read_to_end(sock):
    return b"".join(iter(lambda: sock.recv(65536), b""))
