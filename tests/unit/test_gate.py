"""placement.cmd.gate.Gate (placement-api --active): at most ``active``
requests of a worker run at once, and of those at most one CPU-heavy read
(candidates, provider list)."""

import threading
import time

from placement.cmd import gate


class Recorder:
    """A WSGI app that records how many requests (and heavy reads) it runs
    at the same moment. Until ``overlap`` requests have run at once, each
    waits for the others (up to 5 s): thread start-up on a loaded machine
    must not decide whether requests meet in the app. After that each runs
    for 20 ms."""

    def __init__(self, overlap):
        self.overlap = overlap
        self.met = threading.Condition()
        self.running = self.heavy = self.max_running = self.max_heavy = 0

    def __call__(self, environ, start_response):
        heavy = environ["PATH_INFO"].rstrip("/") in (
            "/allocation_candidates",
            "/resource_providers",
        )
        with self.met:
            self.running += 1
            self.heavy += heavy
            self.max_running = max(self.max_running, self.running)
            self.max_heavy = max(self.max_heavy, self.heavy)
            self.met.notify_all()
            self.met.wait_for(lambda: self.max_running >= self.overlap, timeout=5)
        time.sleep(0.02)
        with self.met:
            self.running -= 1
            self.heavy -= heavy
        return [b""]


def _run(gate, requests):
    threads = []
    for method, url in requests:
        path, _, query = url.partition("?")
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}
        threads.append(threading.Thread(target=gate, args=(environ, None)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _through_gate(active, requests, overlap=None):
    """The Recorder of ``requests`` sent at once through a gate of
    ``active`` slots; they are held until ``overlap`` (default ``active``)
    run at once."""
    app = Recorder(overlap or active)
    _run(gate.Gate(app, active), requests)
    return app


def test_heavy_reads_take_turns_but_writes_overlap():
    app = _through_gate(
        3,
        [("GET", "/allocation_candidates")] * 4
        + [("GET", "/resource_providers")] * 2
        + [("PUT", "/allocations/x")] * 4,
    )
    assert app.max_heavy == 1
    assert app.max_running == 3


def test_other_reads_and_filtered_paths_are_not_heavy():
    app = _through_gate(4, [("GET", "/resource_providers/x/inventories")] * 4)
    assert app.max_running == 4


def test_provider_lists_of_one_tree_or_provider_are_not_heavy():
    # The Recorder counts every /resource_providers read as heavy: more
    # than one at once shows that the gate let them overlap.
    app = _through_gate(
        8,
        [("GET", "/resource_providers?in_tree=x")] * 2
        + [("GET", "/resource_providers/?uuid=x&required=T")] * 2
        + [("GET", "/resource_providers?name=x")] * 2,
        overlap=6,
    )
    assert app.max_heavy > 1
    # Wider filters are still one at a time.
    app = _through_gate(
        8,
        [("GET", "/resource_providers?member_of=x&resources=VCPU:1")] * 3
        + [("GET", "/resource_providers?required=T")] * 3
        + [("GET", "/allocation_candidates?in_tree=x")] * 2,
        overlap=1,
    )
    assert app.max_heavy == 1


def test_waiters_are_admitted_in_arrival_order():
    slot = gate.FairSemaphore(1)
    slot.acquire()
    admitted = []

    def wait(n):
        slot.acquire()
        admitted.append(n)
        slot.release()

    threads = []
    for n in range(8):
        thread = threading.Thread(target=wait, args=(n,))
        thread.start()
        threads.append(thread)
        # Each waiter queues before the next one starts.
        while len(slot._waiters) <= n:
            time.sleep(0.001)
    # A newcomer does not jump the queue when the slot is handed on.
    slot.release()
    slot.acquire()
    admitted.append("late")
    slot.release()
    for thread in threads:
        thread.join()
    assert admitted == list(range(8)) + ["late"]
