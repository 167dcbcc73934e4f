"""Tracing (doc/operations.md "Tracing"): a request carrying a trace from a
real osprofiler client, signed with a key of ``[profiler] hmac_keys``, is
traced into the configured driver (its span, and a span per SQL statement);
any other request is traced by nothing and answered as usual; disabled,
nothing of osprofiler is in the pipeline or on the engine.

The driver read back is osprofiler's sqlalchemy driver on a MySQL database
(its table, ``data``: the driver's own reader is broken on SQLAlchemy 2),
and through a real ``placement-api`` the otlp driver, whose spans a
collector on a loopback port receives."""

import contextlib
import http.server
import os
import subprocess
import sys
import threading
import time
import uuid

import orjson
import pytest
import requests
import sqlalchemy as sa
from keystoneauth1 import session as ksa_session
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from osprofiler import _utils as osprofiler_utils
from osprofiler import notifier
from osprofiler import profiler
from osprofiler import web
from osprofiler.drivers import base as drivers

from placement import deploy
from placement.api import tracing
from tests import fixtures
from tests import ports
from tests.functional import live_server
from tests.wsgi_client import call

KEY = "shared-with-nova"
ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}


def _trace_headers(key=KEY):
    """The headers nova's report client sends inside a span of a trace,
    signed with ``key``, and (the trace's base id, that span's id). The
    client's trace is left, as another process would be."""
    client = profiler.init(key, base_id=str(uuid.uuid4()), parent_id=str(uuid.uuid4()))
    try:
        return web.get_trace_id_headers(), client.get_base_id(), client.get_id()
    finally:
        profiler.clean()


@contextlib.contextmanager
def _span_store():
    """The connection string of osprofiler's sqlalchemy driver on a fresh
    MySQL database (autocommit: the driver never commits), and a reader of
    the rows it holds."""
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        url = url.split("?")[0] + "?autocommit=true"
        # The driver makes its table as it starts.
        drivers.get_driver(url)
        engine = sa.create_engine(url)

        def rows():
            with engine.connect() as conn:
                found = conn.execute(
                    sa.text(
                        "SELECT name, base_id, parent_id, trace_id, data FROM data "
                        "ORDER BY id"
                    )
                )
                return [
                    dict(row._mapping, data=orjson.loads(orjson.loads(row.data)))
                    for row in found
                ]

        try:
            yield url, rows
        finally:
            engine.dispose()


@contextlib.contextmanager
def _traced_app(connection_string, backend="sqlite", **options):
    settings = {
        "profiler.enabled": True,
        "profiler.trace_sqlalchemy": True,
        "profiler.hmac_keys": KEY,
        "profiler.connection_string": connection_string,
    }
    settings.update(options)
    with fixtures.overrides(**settings) as conf, fixtures.database(backend) as db:
        yield deploy.build_app(conf, db=db), db


def _spans(rows, base_id):
    """{trace_id: (name, parent_id, start info)} of a trace's spans that
    started and stopped."""
    started = {
        r["trace_id"]: (r["name"][: -len("-start")], r["parent_id"], r["data"])
        for r in rows
        if r["base_id"] == base_id and r["name"].endswith("-start")
    }
    stopped = {
        r["trace_id"]
        for r in rows
        if r["base_id"] == base_id and r["name"].endswith("-stop")
    }
    assert set(started) == stopped
    return started


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_a_traced_request_has_its_span_and_its_statements_spans(backend):
    fixtures.require_backend(backend)
    with _span_store() as (url, rows), _traced_app(url, backend) as (app, _db):
        headers, base_id, parent = _trace_headers()
        name = "traced-%s" % uuid.uuid4().hex[:8]
        created = call(
            app,
            "/resource_providers",
            method="POST",
            body={"name": name},
            headers=dict(ADMIN, **headers),
        )
        assert created.status == 200
        assert created.json()["name"] == name
        spans = _spans(rows(), base_id)
        # A traced answer is the answer: status, headers and body.
        path = "/resource_providers/%s" % created.json()["uuid"]
        plain = call(app, path, headers=ADMIN)
        traced = call(app, path, headers=dict(ADMIN, **_trace_headers()[0]))
        for response in (plain, traced):
            response.headers.pop("x-openstack-request-id")
        assert (traced.status, traced.headers, traced.body) == (
            plain.status,
            plain.headers,
            plain.body,
        )
    [(request_id, request)] = [(t, s) for t, s in spans.items() if s[0] == "wsgi"]
    # Under the client's span, as nova's report client sent it.
    assert request[1] == parent
    assert request[2]["info"]["request"] == {
        "path": "/resource_providers",
        "query": "",
        "method": "POST",
        "scheme": "http",
    }
    statements = [
        s[2]["info"]["db"]["statement"] for s in spans.values() if s[0] == "db"
    ]
    assert all(s[1] == request_id for s in spans.values() if s[0] == "db")
    assert any(s.startswith("INSERT INTO resource_providers") for s in statements)
    assert len(statements) + 1 == len(spans)


def test_untraced_and_badly_signed_requests_are_traced_by_nothing():
    with _span_store() as (url, rows), _traced_app(url) as (app, _db):
        expected = call(app, "/resource_providers", headers=ADMIN)
        assert expected.status == 200
        good, base_id, _ = _trace_headers()
        other_key, other_base, _ = _trace_headers("not-the-configured-key")
        tampered = dict(good, **{web.X_TRACE_HMAC: "0" * 40})
        unsigned = {web.X_TRACE_INFO: good[web.X_TRACE_INFO]}
        for headers in (other_key, tampered, unsigned, {}):
            response = call(app, "/resource_providers", headers=dict(ADMIN, **headers))
            assert (response.status, response.body) == (200, expected.body)
        assert rows() == []
        # The same trace, signed right, is traced: the store is read right.
        call(app, "/resource_providers", headers=dict(ADMIN, **good))
        assert {r["base_id"] for r in rows()} == {base_id}


def _pipeline(app):
    """The objects a request passes through, outermost first."""
    found = []
    while app is not None:
        found.append(app)
        app = next(
            (
                getattr(app, name)
                for name in ("app", "application", "_app")
                if getattr(app, name, None) is not None
            ),
            None,
        )
    return found


def _statement_traced(db):
    """Whether a statement on ``db``'s engine, run in a trace, is sent
    to the process's notifier (set here to a fresh recorder)."""
    sent = []
    previous = notifier.get()
    notifier.set(sent.append)
    profiler.init(KEY)
    try:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        profiler.clean()
        notifier.set(previous)
    return any(info["name"] == "db-start" for info in sent)


def test_disabled_nothing_of_osprofiler_is_in_the_pipeline_or_on_the_engine():
    with fixtures.database("sqlite") as db:
        app = deploy.build_app(fixtures.configure(), db=db)
        layers = _pipeline(app)
        assert len(layers) > 5  # the walk reaches the falcon app
        assert not [
            layer
            for layer in layers
            if type(layer).__module__.startswith(("osprofiler", tracing.__name__))
        ]
        assert not _statement_traced(db)
        headers, _, _ = _trace_headers()
        response = call(app, "/resource_providers", headers=dict(ADMIN, **headers))
        assert response.status == 200
    # Enabled, the same walk and recorder find both.
    with _traced_app("sqlalchemy://unused") as (app, db):
        layers = _pipeline(app)
        assert any(isinstance(layer, tracing.Tracing) for layer in layers)
        # Right inside the request id: its span covers the rest.
        assert isinstance(layers[1], tracing.Tracing)
        assert _statement_traced(db)


def test_statements_untraced_with_trace_sqlalchemy_off():
    with _traced_app("sqlalchemy://unused", **{"profiler.trace_sqlalchemy": False}) as (
        app,
        db,
    ):
        assert isinstance(_pipeline(app)[1], tracing.Tracing)
        assert not _statement_traced(db)


# Blocks the import of osprofiler, then reads the configuration the
# environment gives.
WITHOUT_OSPROFILER = """
import sys
sys.modules["osprofiler"] = None
from placement import conf
c = conf.command_conf()
try:
    conf.parse_args(c, [], default_config_files=[])
except conf.StartupError as e:
    print("refused:", e)
else:
    print("enabled:", c.profiler.enabled)
"""


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_without_osprofiler_tracing_is_refused_at_start_up(enabled):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env["OS_PROFILER__ENABLED"] = enabled
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OSPROFILER],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    if enabled == "true":
        assert result.stdout.startswith(
            "refused: [profiler] enabled is True but osprofiler is not installed"
        )
        assert "placement-py[profiler]" in result.stdout
    else:
        assert result.stdout.strip() == "enabled: False"


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps the spans it is sent."""

    spans: list

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            attributes = {
                a.key: a.value.string_value for a in resource.resource.attributes
            }
            for scope in resource.scope_spans:
                self.spans.extend((attributes, span) for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _collector():
    handler = type("Collector", (_Collector,), {"spans": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", ports.free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler.spans
    finally:
        server.shutdown()
        server.server_close()


def _wait_for(spans, trace_id, timeout=30):
    """The spans of ``trace_id`` once its request's span has arrived (it
    ends after its statements', which are exported before it or with it)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [(a, s) for a, s in list(spans) if s.trace_id == trace_id]
        if any(s.name.startswith("WSGI_") for _a, s in found):
            return found
        if time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _as_nova_sends(url, base_id, parent):
    """A GET sent as nova's report client sends it inside a traced span
    (``parent``): through a keystoneauth session, which adds the trace's
    headers itself."""
    profiler.init(KEY, base_id=base_id, parent_id=parent)
    try:
        return ksa_session.Session().get(
            url, headers=ADMIN, authenticated=False, raise_exc=False
        )
    finally:
        profiler.clean()


def test_placement_api_workers_send_spans_to_an_otlp_collector(tmp_path, api_server):
    """Through the real server (each of its HTTP servers): the app is
    built in the master, and each worker makes its exporter (a thread)
    after the fork."""
    with (
        _collector() as (port, spans),
        live_server.placement_api(
            str(tmp_path),
            "--workers",
            "2",
            server=api_server,
            OS_PROFILER__ENABLED="true",
            OS_PROFILER__TRACE_SQLALCHEMY="true",
            OS_PROFILER__HMAC_KEYS="another-key," + KEY,
            OS_PROFILER__CONNECTION_STRING="otlp://127.0.0.1:%d" % port,
            # Export every 100 ms rather than every 5 s.
            OTEL_BSP_SCHEDULE_DELAY="100",
            NO_PROXY="127.0.0.1",
        ) as url,
    ):
        traces = []
        # Several, so that both workers are likely to serve one.
        for _ in range(4):
            base_id, parent = str(uuid.uuid4()), str(uuid.uuid4())
            response = _as_nova_sends(url + "/resource_providers", base_id, parent)
            assert response.status_code == 200
            assert response.json() == {"resource_providers": []}
            traces.append((base_id, parent))
        untraced = requests.get(url + "/resource_providers", headers=ADMIN, timeout=30)
        assert untraced.status_code == 200
        for base_id, parent in traces:
            trace_id = osprofiler_utils.uuid_to_int128(base_id).to_bytes(16, "big")
            found = _wait_for(spans, trace_id)
            [request] = [s for _a, s in found if s.name.startswith("WSGI_")]
            assert request.name == "WSGI_GET_/resource_providers"
            assert request.parent_span_id == osprofiler_utils.shorten_id(
                parent
            ).to_bytes(8, "big")
            statements = [s for _a, s in found if s.name.startswith("SQL_")]
            assert statements
            assert all(s.parent_span_id == request.span_id for s in statements)
            assert {a["service.name"] for a, _s in found} == {"placement-api"}
        # Nothing else was traced.
        assert {s.trace_id for _a, s in spans} == {
            osprofiler_utils.uuid_to_int128(b).to_bytes(16, "big") for b, _ in traces
        }


@pytest.mark.parametrize(
    "keys,warned",
    [("SECRET_KEY", True), (KEY + ", SECRET_KEY", True), (KEY, False)],
)
def test_start_up_warns_of_osprofilers_default_key(caplog, keys, warned):
    settings = {"profiler.enabled": True, "profiler.hmac_keys": keys}
    with fixtures.overrides(**settings) as conf, caplog.at_level("WARNING"):
        deploy.log_summary(conf)
    warnings = [r.getMessage() for r in caplog.records if "hmac_keys" in r.getMessage()]
    assert bool(warnings) is warned
    if warned:
        assert "anyone can have requests traced" in warnings[0]


def test_a_workers_threads_end_their_own_spans():
    """Two traced requests at once in one process (a worker's threads): each
    ends its own span, though the otlp driver kept one stack per process."""
    from opentelemetry import trace as trace_api

    a_started, b_started, a_ended = (threading.Event() for _ in range(3))

    def request(path, begin_after, then, end_after, ended=None, stop_info=None):
        profiler.init(KEY, base_id=str(uuid.uuid4()), parent_id=str(uuid.uuid4()))
        try:
            if begin_after is not None:
                begin_after.wait(10)
            info = {"path": path, "query": "", "method": "GET", "scheme": "http"}
            profiler.start("wsgi", info={"request": info})
            then.set()
            end_after.wait(10)
            profiler.stop(info=stop_info)
            if ended is not None:
                ended.set()
        finally:
            profiler.clean()

    with _collector() as (port, spans):
        settings = {
            "profiler.enabled": True,
            "profiler.connection_string": "otlp://127.0.0.1:%d" % port,
        }
        with fixtures.overrides(**settings) as conf:
            tracing.start(conf)
        # /a starts, then /b; /a ends, then /b, with an error.
        failed = {"etype": "RuntimeError", "message": "b failed"}
        threads = [
            threading.Thread(
                target=request, args=("/a", None, a_started, b_started, a_ended)
            ),
            threading.Thread(
                target=request, args=("/b", a_started, b_started, a_ended, None, failed)
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        trace_api.get_tracer_provider().force_flush()
        ended = {
            span.name: {a.key for a in span.attributes} for _a, span in list(spans)
        }
    assert set(ended) == {"WSGI_GET_/a", "WSGI_GET_/b"}
    assert "error" in ended["WSGI_GET_/b"]
    assert "error" not in ended["WSGI_GET_/a"]
