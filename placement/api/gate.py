"""How many requests a gunicorn worker executes at once (placement-api
``--active``)."""
import threading


class Gate:
    """Lets ``active`` requests of a worker run at once; its other threads
    wait here, blocked, until one finishes.

    Requests are CPU-bound Python: threads running together only take turns
    on the GIL, and every row SQLite steps releases and re-takes it, so a
    busy neighbour makes each row wait for a switch interval. Measured
    (flat 1000 providers, 2 workers x 10 threads, 10 clients, SQLite):
    9.5 req/s at 128 ms CPU per request with no gate, 15-18 req/s at 87-94
    ms with 1-2 active requests per worker; two let a request's database
    waits (MySQL) overlap with another's Python. Threads still accept and
    read requests, and answers are written to the socket outside the gate.
    Heavy reads also take turns with each other (nested, MySQL, 10
    clients: 10.1 -> 11.9 req/s, 186 -> 159 ms CPU per request; flat,
    SQLite: 52.7 -> 62.5 req/s).
    """

    # Reads that are Python work from start to end (candidate searches,
    # provider lists): one at a time per worker, so two never share the
    # GIL; the other slots are left to requests that wait on the database.
    HEAVY = ("/allocation_candidates", "/resource_providers")

    def __init__(self, app, active):
        self.app = app
        self.slots = threading.BoundedSemaphore(active)
        self.heavy = threading.Lock()

    def __call__(self, environ, start_response):
        if (environ.get("REQUEST_METHOD") == "GET"
                and environ.get("PATH_INFO", "").rstrip("/") in self.HEAVY):
            with self.heavy, self.slots:
                return self.app(environ, start_response)
        with self.slots:
            return self.app(environ, start_response)
