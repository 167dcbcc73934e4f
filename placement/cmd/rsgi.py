"""The WSGI app behind granian's RSGI interface (``placement-api
--server granian``).

Under granian's WSGI interface the app is called once a request's head
is in, and a read of the body blocks the app's thread until all of it
has arrived, with no time limit: a few clients sending bodies slowly
hold every thread of a worker. Here the body is read in granian's event
loop, where a waiting request costs a coroutine, not a thread, and must
arrive within ``BODY_TIMEOUT`` seconds after the head, else it is
answered 408 (as by placement's gunicorn worker, ``cmd/worker``). Only
complete requests go to the worker's ``threads`` threads, which run the
WSGI app and write its answer. A body announced over ``limit`` bytes, or
sent without ``Content-Length`` (chunked), is not read: the app answers
the first 413 unread and never reads the second (``api/sizelimit``).

A cheap read (``CHEAP``: the root document, and a provider's or a
consumer's own records, answered from the held catalog after one
statement) is run at once while no request of the worker is in its
threads and ``in_loop()`` allows (the catalog needs no comparison with
the database first): no hand-off to one of placement's threads, and no
thread is executing, so the gate never makes it wait. With the
``scheduler`` installed (``placement-api`` does) it runs in granian's
own thread, the one that holds the GIL to hand each request to the event
loop (``answer_here``), so it is not handed to the loop either: that
hand-off was a third of a small read's server CPU beyond the app's
(thread wake-ups and GIL hand-overs while the read waited on the
database; tools/bench/README, issue 45, "cheap reads in granian's
thread"). Without it, or for a GET with a body, it runs in the event
loop. A claim's two requests (``BOUNDED``: a candidate search with a
``limit``, whose answer is bounded, and the PUT of one consumer's
allocations) run in the event loop on the same terms: the hand-off to a
thread and back cost a claim about 0.4 ms of the worker's CPU, ~10%
(tools/bench/README "Issue 45: a claim over HTTP"); so do a host's
registration writes (the POST of a provider, the PUT of its
inventories, traits or aggregates: one provider's rows each), whose
hand-off was ~4 of a write's ~14 context switches, up to ~0.09 ms of
its ~1.4 ms of server CPU (tools/bench/README "Issue 45: where a
request's CPU goes over HTTP"). A write's own pauses (a
generation race's jitter, a deadlock's back-off, a few milliseconds)
then hold the loop too. Either way requests that come in
meanwhile wait for it, as they would for a thread. Everything else, and
any of these while another request is in a thread, goes to the threads.

An answer the app returns as a list is written in one piece; one it
returns as an iterator (a streamed candidate answer) is produced in the
thread as it is written, a piece at a time, and closed when it ends or
the client goes away.
"""

import asyncio
import inspect
import io
import queue
import re
import sys
import threading
import time

from granian.rsgi import ProtocolClosed

from placement import arrival
from placement.cmd.worker import BODY_TIMEOUT
from placement.cmd.worker import LATE_BODY

_EMPTY = b""
_LATE_HEADERS = [("content-type", "application/json"), ("connection", "close")]
# The environ key of each header name seen (PEP 3333's CGI names), up to
# _KEYS_MAX names: a client choosing names freely does not grow it past.
_KEYS = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}
_KEYS_MAX = 512
# GET paths run in the event loop when the worker's threads are idle: the
# root document, and a provider's or a consumer's own records, one short
# read transaction each (the held catalog's stamp, and its catch-up after
# a write, or one statement); no search, no list, no write.
CHEAP = re.compile(
    r"(?:/resource_providers/[^/]+"
    r"(?:/(?:allocations|inventories|usages|traits|aggregates))?"
    r"|/allocations/[^/]+)?/?\Z"
)
# Requests run in the event loop on the same terms: a claim's candidate
# search when limited (the answer is bounded, not streamed) and its write
# of one consumer's allocations; a host's registration writes, one
# provider's rows each.
BOUNDED = {
    "GET": re.compile(r"/allocation_candidates/?\Z"),
    "POST": re.compile(r"/resource_providers/?\Z"),
    "PUT": re.compile(
        r"(?:/allocations/[^/]+"
        r"|/resource_providers/[^/]+/(?:inventories|traits|aggregates))/?\Z"
    ),
}
_LIMITED = re.compile(r"(?:\A|&)limit=")


class App:
    """granian's RSGI target around the WSGI ``app``, mounted at
    ``script_name``: ``threads`` threads run it (started in the worker
    process, by ``__rsgi_init__``), and the event loop a cheap read while
    they are idle and ``in_loop()`` is true."""

    def __init__(self, app, threads, limit, script_name="", in_loop=lambda: True):
        self.app = app
        self.in_loop = in_loop
        self.threads = threads
        self.limit = limit
        self.script_name = script_name
        self.loop = None
        # (environ, granian's protocol, future done when answered)
        self.requests = queue.SimpleQueue()
        # Requests handed to the threads and not yet answered (counted in
        # the event loop only).
        self.in_threads = 0
        self.base = {
            "SCRIPT_NAME": script_name,
            "SERVER_SOFTWARE": "granian",
            "wsgi.errors": sys.stderr,
            "wsgi.input_terminated": True,
            "wsgi.multiprocess": True,
            "wsgi.multithread": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }

    def __rsgi_init__(self, loop):
        self.loop = loop
        for number in range(self.threads):
            threading.Thread(
                target=self.serve, name="placement-%d" % number, daemon=True
            ).start()

    def __rsgi_del__(self, loop):
        for _ in range(self.threads):
            self.requests.put(None)

    async def __rsgi__(self, scope, proto):
        environ = self.environ(scope)
        length = environ.get("CONTENT_LENGTH")
        body = _EMPTY
        if length and length.isdigit() and 0 < int(length) <= self.limit:
            try:
                body = await asyncio.wait_for(proto(), BODY_TIMEOUT)
            except TimeoutError:
                proto.response_bytes(408, _LATE_HEADERS, LATE_BODY)
                return
            except ProtocolClosed:  # the client went away
                return
        environ["wsgi.input"] = io.BytesIO(body)
        environ[ARRIVED] = _arrived(scope)
        if not self.in_threads and self._in_loop(environ):
            self.call(environ, proto, inline=True)
            return
        done = self.loop.create_future()
        self.in_threads += 1
        self.requests.put((environ, proto, done))
        try:
            await done
        finally:
            self.in_threads -= 1

    def answer_here(self, scope, proto):
        """True when the request is a cheap read without a body that may
        run now, answered here (in the calling thread); False when it
        must go to the event loop (``__rsgi__``)."""
        if self.in_threads or scope.method != "GET":
            return False
        path = scope.path
        if self.script_name and path.startswith(self.script_name):
            path = path[len(self.script_name) :]
        if not CHEAP.match(path) or scope.headers.get("content-length"):
            return False
        if not self.in_loop():
            return False
        environ = self.environ(scope)
        environ["wsgi.input"] = io.BytesIO(_EMPTY)
        self.call(environ, proto, inline=True)
        return True

    def _in_loop(self, environ):
        """Whether the request may run in the event loop (when no request
        of the worker is in its threads): a cheap read, a claim's or a
        registration write (``BOUNDED``), and ``in_loop()``."""
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        if method == "GET" and CHEAP.match(path):
            return self.in_loop()
        bounded = BOUNDED.get(method)
        if bounded is None or not bounded.match(path):
            return False
        if method == "GET" and not _LIMITED.search(environ["QUERY_STRING"]):
            return False
        return self.in_loop()

    def environ(self, scope):
        """The WSGI environ of a request (PEP 3333: the path as latin-1
        of its bytes, repeated headers joined by commas)."""
        environ = self.base.copy()
        path = scope.path
        if not path.isascii():
            path = path.encode().decode("latin-1")
        if self.script_name and path.startswith(self.script_name):
            path = path[len(self.script_name) :]
        host, _, port = scope.server.rpartition(":")
        environ["REQUEST_METHOD"] = scope.method
        environ["PATH_INFO"] = path
        environ["QUERY_STRING"] = scope.query_string
        environ["SERVER_NAME"] = host
        environ["SERVER_PORT"] = port
        environ["SERVER_PROTOCOL"] = "HTTP/" + scope.http_version
        environ["REMOTE_ADDR"] = scope.client.rpartition(":")[0]
        environ["wsgi.url_scheme"] = scope.scheme
        for name, value in scope.headers.items():
            key = _KEYS.get(name)
            if key is None:
                key = "HTTP_" + name.upper().replace("-", "_")
                if len(_KEYS) < _KEYS_MAX:
                    _KEYS[name] = key
            if key in environ:
                value = environ[key] + "," + value
            environ[key] = value
        return environ

    def serve(self):
        """A thread's work: requests, one after another, until told to
        stop."""
        call_soon = self.loop.call_soon_threadsafe
        while (request := self.requests.get()) is not None:
            environ, proto, done = request
            try:
                self.call(environ, proto)
            except BaseException as e:
                call_soon(done.set_exception, e)
            else:
                call_soon(done.set_result, None)

    def call(self, environ, proto, inline=False):
        """The app's answer to a request, written; ``inline`` in the event
        loop, where an answer is written in one piece."""
        started = []

        def start_response(status, headers, exc_info=None):
            started[:] = (status, headers)

        with arrival.at(environ.get(ARRIVED)):
            answer = self.app(environ, start_response)
        if inline and type(answer) is not list:
            pieces = answer
            try:
                answer = [_EMPTY.join(pieces)]
            finally:
                if hasattr(pieces, "close"):
                    pieces.close()
        if type(answer) is list:
            status, headers = started
            proto.response_bytes(int(status[:3]), headers, _EMPTY.join(answer))
            return
        try:
            pieces = iter(answer)
            first = next(pieces, _EMPTY)
            status, headers = started
            transport = proto.response_stream(int(status[:3]), headers)
            self.send(transport, first)
            for piece in pieces:
                self.send(transport, piece)
        except ProtocolClosed:  # the client went away
            pass
        finally:
            if hasattr(answer, "close"):
                answer.close()

    def send(self, transport, piece):
        """A piece of a streamed answer, written by the event loop; back
        once it is."""
        if piece:
            sent = asyncio.run_coroutine_threadsafe(_send(transport, piece), self.loop)
            sent.result()


async def _send(transport, piece):
    # granian's send_bytes is an awaitable, not a coroutine.
    await transport.send_bytes(piece)


# When each request handed to the event loop arrived (``scheduler``): by
# the id of its scope, with the scope itself (so that the id is not another
# object's meanwhile), taken by ``__rsgi__``. Requests whose coroutine
# never ran leave theirs: past ARRIVALS_KEPT it is emptied (the requests
# then have no arrival: their answers are confirmed as before).
_ARRIVALS: dict[int, tuple[object, float]] = {}
ARRIVALS_KEPT = 4096
# The environ's key for it (``arrival``).
ARRIVED = "placement.arrived"


def _arriving(scope, arrived):
    if len(_ARRIVALS) >= ARRIVALS_KEPT:
        _ARRIVALS.clear()
    _ARRIVALS[id(scope)] = (scope, arrived)


def _arrived(scope):
    """When the request of ``scope`` arrived (``scheduler``), or None."""
    entry = _ARRIVALS.pop(id(scope), None)
    if entry is None or entry[0] is not scope:
        return None
    return entry[1]


def scheduler(served):
    """granian's scheduling of an RSGI request (``_cbsched_schedule`` of
    ``granian._futures``, which its worker calls in the thread that holds
    the GIL for each request: it hands the request's coroutine to the
    event loop) with ``served.answer_here`` first."""

    def schedule(loop, ctx, run, cb):
        def _schedule(watcher):
            arrived = time.monotonic()
            try:
                answered = served.answer_here(watcher.scope, watcher.proto)
            except BaseException as e:  # as granian's coroutine reports it
                watcher.err(e)
                return
            if answered:
                watcher.done()
                return
            _arriving(watcher.scope, arrived)
            loop.call_soon_threadsafe(run, cb(watcher), context=ctx)

        return _schedule

    return schedule


def install_scheduler(served):
    """``scheduler(served)`` in granian, for the workers it starts next;
    False (nothing changed: cheap reads run in the event loop) where
    granian has no such function of that signature (another release)."""
    from granian import _futures

    known = getattr(_futures, "_cbsched_schedule", None)
    if known is None or list(inspect.signature(known).parameters) != [
        "loop",
        "ctx",
        "run",
        "cb",
    ]:
        return False
    _futures._cbsched_schedule = scheduler(served)
    return True
