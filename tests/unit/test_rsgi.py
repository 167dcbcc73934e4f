"""What a WSGI app behind placement's RSGI adapter (cmd/rsgi) is given
and what granian is told to answer: PEP 3333's environ (the path as
latin-1 of its UTF-8 bytes, repeated headers joined, the mount prefix
taken off), the body read before the app runs, its answer written once,
a streamed answer piece by piece and closed; a small read or a claim's
request run in the loop answered in one piece, or by a thread while a
long request is in progress."""

import asyncio
import threading
import time
import types

from placement import arrival
from placement.cmd import gate
from placement.cmd import rsgi


class Headers:
    def __init__(self, items):
        self._items = items

    def items(self):
        return self._items

    def get(self, name, default=None):
        return next((v for k, v in self._items if k == name), default)


class Proto:
    """granian's protocol of one request, as the adapter uses it."""

    def __init__(self, body=b""):
        self.body = body
        self.answers = []
        self.pieces = []

    async def __call__(self):
        return self.body

    def response_bytes(self, status, headers, body):
        self.answers.append((status, headers, body))

    def response_stream(self, status, headers):
        self.answers.append((status, headers, None))
        return self

    async def send_bytes(self, piece):
        self.pieces.append(piece)


def _scope(path, headers, method="GET", query="a=1"):
    return types.SimpleNamespace(
        path=path,
        method=method,
        query_string=query,
        server="127.0.0.1:8778",
        client="10.0.0.9:40000",
        http_version="1.1",
        scheme="http",
        headers=Headers(headers),
    )


def _serve(app, scope, proto, in_loop=True):
    async def run():
        served.__rsgi_init__(asyncio.get_running_loop())
        try:
            await served.__rsgi__(scope, proto)
        finally:
            served.__rsgi_del__(None)

    served = rsgi.App(app, 2, 1000, "/placement", lambda: in_loop)
    asyncio.run(run())


def test_the_app_gets_the_environ_and_the_whole_body():
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        seen["body"] = environ["wsgi.input"].read()
        start_response("201 Created", [("x-a", "b")])
        return [b"do", b"ne"]

    proto = Proto(b'{"name": "x"}')
    scope = _scope(
        "/placement/x/\u00e9",
        [
            ("content-type", "application/json"),
            ("content-length", "13"),
            ("x-many", "1"),
            ("x-many", "2"),
        ],
        method="POST",
    )
    _serve(app, scope, proto)
    assert seen["body"] == b'{"name": "x"}'
    assert seen["PATH_INFO"] == "/x/\u00c3\u00a9"
    assert seen["SCRIPT_NAME"] == "/placement"
    assert seen["QUERY_STRING"] == "a=1"
    assert seen["REQUEST_METHOD"] == "POST"
    assert seen["CONTENT_TYPE"] == "application/json"
    assert seen["CONTENT_LENGTH"] == "13"
    assert seen["HTTP_X_MANY"] == "1,2"
    assert (seen["SERVER_NAME"], seen["SERVER_PORT"]) == ("127.0.0.1", "8778")
    assert seen["REMOTE_ADDR"] == "10.0.0.9"
    assert proto.answers == [(201, [("x-a", "b")], b"done")]


def test_a_body_over_the_limit_is_not_read():
    def app(environ, start_response):
        assert environ["wsgi.input"].read() == b""
        start_response("413 Request Entity Too Large", [])
        return [b""]

    proto = Proto(b"x" * 2000)
    _serve(app, _scope("/placement/", [("content-length", "2000")], "POST"), proto)
    assert proto.answers == [(413, [], b"")]


def _streaming_app(closed):
    """A WSGI app answering 200 with an iterator of the pieces a, (empty)
    and b, which notes in ``closed`` when it is closed."""

    class Pieces:
        def __iter__(self):
            return iter([b"a", b"", b"b"])

        def close(self):
            closed.append(True)

    def app(environ, start_response):
        start_response("200 OK", [])
        return Pieces()

    return app


def test_a_streamed_answer_goes_piece_by_piece_and_is_closed():
    closed = []
    app = _streaming_app(closed)

    proto = Proto()
    _serve(app, _scope("/placement/allocation_candidates", []), proto)
    assert proto.answers == [(200, [], None)]
    assert proto.pieces == [b"a", b"b"]
    assert closed == [True]


def test_header_names_a_client_makes_up_do_not_grow_the_adapter():
    served = rsgi.App(None, 1, 1000)
    names = ["x-made-up-%d" % n for n in range(2 * rsgi._KEYS_MAX)]
    environ = served.environ(_scope("/", [(name, "v") for name in names]))
    assert len(rsgi._KEYS) <= rsgi._KEYS_MAX
    # Past the bound the names are still given to the app.
    assert environ["HTTP_X_MADE_UP_%d" % (2 * rsgi._KEYS_MAX - 1)] == "v"


def test_a_small_read_alone_is_answered_in_one_piece_and_closed():
    closed = []
    app = _streaming_app(closed)

    proto = Proto()
    _serve(app, _scope("/placement/resource_providers/x", []), proto)
    assert proto.answers == [(200, [], b"ab")]
    assert closed == [True]


def test_a_small_read_is_answered_while_a_long_request_is_in_progress():
    started, release = threading.Event(), threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/allocation_candidates":
            started.set()
            release.wait(30)
        start_response("200 OK", [])
        return [environ["PATH_INFO"].encode()]

    long, small = Proto(), Proto()

    async def run():
        served.__rsgi_init__(asyncio.get_running_loop())
        try:
            in_progress = asyncio.ensure_future(
                served.__rsgi__(_scope("/placement/allocation_candidates", []), long)
            )
            await asyncio.to_thread(started.wait, 30)
            await served.__rsgi__(_scope("/placement/", []), small)
            answered_meanwhile = list(long.answers)
            release.set()
            await in_progress
        finally:
            served.__rsgi_del__(None)
        return answered_meanwhile

    # Behind the gate, two requests executed at once (``--active 2``).
    served = rsgi.App(gate.Gate(app, 2), 2, 1000, "/placement")
    assert asyncio.run(run()) == []
    assert small.answers == [(200, [], b"/")]
    assert long.answers == [(200, [], b"/allocation_candidates")]


def test_a_small_read_runs_in_the_loop_unless_it_may_not():
    ran_in = []

    def app(environ, start_response):
        ran_in.append(threading.current_thread().name)
        start_response("200 OK", [])
        return [b"{}"]

    for in_loop in (True, False):
        proto = Proto()
        _serve(app, _scope("/placement/allocations/x", []), proto, in_loop)
        assert proto.answers == [(200, [], b"{}")]
    assert ran_in[0] == threading.current_thread().name
    assert ran_in[1].startswith("placement-")


class Watcher:
    """granian's watcher of one request, as its scheduling uses it."""

    def __init__(self, scope, proto):
        self.scope, self.proto = scope, proto
        self.ended = []

    def done(self):
        self.ended.append("done")

    def err(self, e):
        self.ended.append(e)


class Loop:
    def __init__(self):
        self.handed = []

    def call_soon_threadsafe(self, run, coroutine, context=None):
        self.handed.append((run, coroutine, context))


def _scheduled(app, scope, in_loop=True, in_threads=0):
    """What granian's scheduling with ``rsgi.scheduler`` does with a
    request: the app's thread, the protocol, the watcher's end, and what
    was handed to the loop."""
    ran_in = []

    def wsgi(environ, start_response):
        ran_in.append(threading.current_thread().name)
        return app(environ, start_response)

    served = rsgi.App(wsgi, 2, 1000, "/placement", lambda: in_loop)
    served.in_threads = in_threads
    loop, proto = Loop(), Proto()
    watcher = Watcher(scope, proto)
    schedule = rsgi.scheduler(served)(loop, "ctx", "run", lambda w: ("coro", w))
    schedule(watcher)
    return ran_in, proto, watcher.ended, loop.handed


def _ok(environ, start_response):
    start_response("200 OK", [("content-type", "application/json")])
    return [environ["PATH_INFO"].encode()]


def test_a_cheap_read_is_answered_in_the_scheduling_thread():
    ran_in, proto, ended, handed = _scheduled(
        _ok, _scope("/placement/resource_providers/x", [])
    )
    assert ran_in == [threading.current_thread().name]
    assert proto.answers == [
        (200, [("content-type", "application/json")], b"/resource_providers/x")
    ]
    assert ended == ["done"] and handed == []


def test_anything_else_goes_to_the_loop():
    body = [("content-length", "2"), ("content-type", "application/json")]
    for scope, in_loop, in_threads in (
        (_scope("/placement/resource_providers", []), True, 0),
        (_scope("/placement/resource_providers/x", [], "PUT"), True, 0),
        (_scope("/placement/resource_providers/x", body), True, 0),
        (_scope("/placement/resource_providers/x", []), False, 0),
        (_scope("/placement/resource_providers/x", []), True, 1),
    ):
        ran_in, proto, ended, handed = _scheduled(_ok, scope, in_loop, in_threads)
        assert ran_in == [] and proto.answers == [] and ended == []
        [(run, (coroutine, watcher), context)] = handed
        assert (run, coroutine, context) == ("run", "coro", "ctx")
        assert watcher.scope is scope


def test_a_request_handed_to_the_loop_keeps_when_it_arrived():
    """The moment granian's thread handed a request to the loop is the
    request's arrival for the app (``placement.arrival``, its environ's
    ``placement.arrived``), however long the loop took to get to it; a
    request granian did not schedule through the adapter has none."""
    seen = []

    def app(environ, start_response):
        seen.append((arrival.get(), environ[rsgi.ARRIVED]))
        return _ok(environ, start_response)

    scope = _scope("/placement/resource_providers", [])
    before = time.monotonic()
    _scheduled(app, scope)
    after = time.monotonic()
    time.sleep(0.01)
    _serve(app, scope, Proto())
    [(arrived, same)] = seen
    assert before <= arrived <= after and same == arrived
    assert arrival.get() is None
    _serve(app, _scope("/placement/resource_providers", []), Proto())
    assert seen[1] == (None, None)


def test_a_cheap_read_that_fails_is_reported_as_granian_reports_it():
    def fails(environ, start_response):
        raise RuntimeError("boom")

    _, proto, [error], handed = _scheduled(fails, _scope("/placement/", []))
    assert isinstance(error, RuntimeError) and handed == []
    assert proto.answers == []


def test_the_scheduler_is_installed_in_this_granian(monkeypatch):
    from granian import _futures

    monkeypatch.setattr(_futures, "_cbsched_schedule", _futures._cbsched_schedule)
    served = rsgi.App(_ok, 2, 1000)
    assert rsgi.install_scheduler(served)
    assert _futures._cbsched_schedule.__qualname__ == "scheduler.<locals>.schedule"
    monkeypatch.setattr(_futures, "_cbsched_schedule", lambda loop, cb: None)
    assert not rsgi.install_scheduler(served)


def test_claims_and_registrations_run_in_the_loop_unless_they_may_not():
    ran_in = []

    def app(environ, start_response):
        ran_in.append(threading.current_thread().name)
        start_response("200 OK", [])
        return [b"{}"]

    loop = threading.current_thread().name
    for method, path, query, in_loop, where in (
        ("GET", "/allocation_candidates", "resources=VCPU:1&limit=5", True, loop),
        ("GET", "/allocation_candidates", "limit=5", False, "placement-"),
        # Unlimited: a streamed answer, as long as the cloud is large.
        ("GET", "/allocation_candidates", "resources=VCPU:1", True, "placement-"),
        ("GET", "/allocation_candidates", "resources=VCPU:1&xlimit=5", True, "pl"),
        ("PUT", "/allocations/x", "", True, loop),
        ("PUT", "/allocations/x", "", False, "placement-"),
        ("DELETE", "/allocations/x", "", True, "placement-"),
        ("POST", "/allocations", "", True, "placement-"),
        # A host's registration: one provider's rows a write.
        ("POST", "/resource_providers", "", True, loop),
        ("POST", "/resource_providers", "", False, "placement-"),
        ("PUT", "/resource_providers/x/inventories", "", True, loop),
        ("PUT", "/resource_providers/x/traits", "", True, loop),
        ("PUT", "/resource_providers/x/aggregates/", "", True, loop),
        ("PUT", "/resource_providers/x/inventories", "", False, "placement-"),
        ("PUT", "/resource_providers/x", "", True, "placement-"),
        ("PUT", "/resource_providers/x/inventories/VCPU", "", True, "placement-"),
        ("DELETE", "/resource_providers/x", "", True, "placement-"),
        ("DELETE", "/resource_providers/x/traits", "", True, "placement-"),
    ):
        proto = Proto()
        _serve(app, _scope("/placement" + path, [], method, query), proto, in_loop)
        assert proto.answers == [(200, [], b"{}")]
        assert ran_in.pop().startswith(where), (method, path, query, in_loop)
