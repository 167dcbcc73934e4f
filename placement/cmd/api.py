"""``placement-api``: serve the WSGI app with granian (or gunicorn).

``placement-api [--config-file PATH] [--server granian|gunicorn] [--host H]
[--port P] [--workers N] [--threads N] [--active N] [--db-sync]``. The
schema is upgraded first when the database is SQLite (a fresh file needs
no set-up) or ``--db-sync`` is given, otherwise it must be at head. The
app is built once before the workers fork, with the provider catalog
read; each worker opens its own database connections and brings the
catalog up to date before it accepts connections.
"""

import ctypes
import gc
import logging
import os
import socket
import sys

# Metrics shared across workers: set up before prometheus_client is imported.
from placement.api import multiproc

multiproc.prepare()

from gunicorn import glogging  # noqa: E402
from gunicorn import util as gunicorn_util  # noqa: E402
from gunicorn.app import base  # noqa: E402
from oslo_config import cfg  # noqa: E402

from placement import conf as placement_conf  # noqa: E402
from placement import deploy  # noqa: E402
from placement import startup  # noqa: E402
from placement.cmd import follower  # noqa: E402
from placement.cmd import gate  # noqa: E402
from placement.cmd import granian_server  # noqa: E402
from placement.objects.catalog import refresh  # noqa: E402
from placement.web import errors  # noqa: E402

LOG = logging.getLogger(__name__)

GC_THRESHOLD = 100_000
# glibc malloc arenas a process may use (mallopt M_ARENA_MAX, -8).
MALLOC_ARENAS = 2
M_ARENA_MAX = -8
THREADS = 4


def usable_cpus():
    """CPUs this process may run on (cgroup/affinity aware where the OS
    tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


SERVERS = ("granian", "gunicorn")

serve_opts = [
    cfg.StrOpt(
        "server",
        default="granian",
        choices=SERVERS,
        help="The HTTP server (default: granian, a Rust HTTP core; "
        "gunicorn: with placement's own worker, about twice the CPU for "
        'a small request). See "HTTP server" in doc/operations.md.',
    ),
    cfg.HostAddressOpt(
        "host", default="127.0.0.1", help="Address to listen on (default: 127.0.0.1)."
    ),
    cfg.PortOpt("port", default=8778, help="Port to listen on (default: 8778)."),
    cfg.IntOpt(
        "workers",
        min=1,
        help="Worker processes (default: the CPUs this process may use, %d "
        "here). Each runs Python code on one CPU at a time." % usable_cpus(),
    ),
    cfg.IntOpt(
        "threads",
        default=THREADS,
        min=1,
        help="Threads per worker (default: %d): they wait on slow clients "
        "and on the database while --active of them execute." % THREADS,
    ),
    cfg.BoolOpt(
        "db-sync",
        default=False,
        help="Upgrade the schema to head before serving (default: off; "
        "always on for SQLite).",
    ),
    cfg.IntOpt(
        "active",
        default=2,
        min=0,
        help="Requests a worker executes at once (default: 2); its other "
        "threads queue. 0: no limit.",
    ),
]

DESCRIPTION = (
    "Serve the Placement API with granian or gunicorn. "
    + placement_conf.DEFAULT_CONFIG_HELP
    + " [placement_database] connection is required."
)


class GunicornLogger(glogging.Logger):
    """gunicorn's own messages (listening, worker start and exit) through
    placement's logging set-up, so that every line has one format. The
    request log is placement's (placement.requestlog), not gunicorn's."""

    def setup(self, cfg):
        self.cfg = cfg
        self.error_log.propagate = True
        # The level comes from placement's (root) logger: --debug or not.
        self.error_log.setLevel(logging.NOTSET)

    def access(self, resp, req, environ, request_time):
        pass


class Server(base.BaseApplication):
    def __init__(self, conf, db):
        self.conf = conf
        self.db = db
        self.served = None
        super().__init__()

    def load_config(self):
        """Every gunicorn setting placement-api makes."""
        # IPv6 literals need brackets in a gunicorn bind address.
        host = self.conf.host
        if ":" in host:
            host = "[%s]" % host
        self.cfg.set("bind", "%s:%d" % (host, self.conf.port))
        self.cfg.set("workers", self.conf.workers)
        self.cfg.set("threads", self.conf.threads)
        self.cfg.set("proc_name", "placement-api")
        self.cfg.set("logger_class", GunicornLogger)
        # One fixed control socket path per user would make instances on
        # one host take it from each other; placement-api does not use it.
        self.cfg.set("control_socket_disable", True)
        # The app is built once, in the master, before the workers fork:
        # they serve at once and share the start-up heap copy-on-write.
        self.cfg.set("preload_app", True)
        # Threads get only fully read requests: slow clients cost no thread.
        self.cfg.set("worker_class", "placement.cmd.worker.HeadFirstWorker")
        # Each worker brings the provider catalog it inherited up to date
        # before it accepts a connection: no request waits for that read.
        self.cfg.set("post_worker_init", lambda worker: self.worker_ready())

    def load(self):
        self.served = build_served_app(self.conf, self.db)
        return self.served

    def worker_ready(self):
        worker_ready(self.conf, self.db, self.served)


def build_served_app(conf, db):
    """The app as the workers serve it, built once in the master: the
    provider catalog read here is shared with the workers as they fork,
    and the gate put around it (``--active``)."""
    app = deploy.build_app(conf, db=db)
    # No cyclic collection while the catalog is made (millions of
    # objects, all kept; tune_gc freezes them next): at 1,000,000
    # providers 45.1 -> 34.3 s of the read's CPU (issue 44).
    gc.disable()
    try:
        deploy.warm_catalog(db)
    finally:
        gc.enable()
    # Connections must not cross the fork into the workers: each opens
    # its own.
    db.engine.dispose()
    tune_gc()
    limit_malloc_arenas()
    return gate.Gate(app, conf.active) if conf.active else app


def worker_ready(conf, db, served):
    """In each worker, before it accepts connections: the catalog up to
    date, and then kept so while the worker is idle (the gate tells when
    it is; without one, requests alone keep it); the tracing driver made
    (doc/operations.md "Tracing")."""
    deploy.warm_catalog(db)
    if conf.profiler.enabled:
        from placement.api import tracing

        # After the fork: the driver's connections and threads are this
        # worker's own.
        tracing.start(conf)
    if isinstance(served, gate.Gate) and conf.placement.provider_catalog:
        follower.Follower(db, served).start()


def write_json_error(sock, status, reason, message):
    """gunicorn's answer to a request it cannot parse (an over-long or
    malformed request line: raw NUL or non-ASCII bytes, a bad method),
    as the API's JSON error document instead of its HTML page. Such a
    request never reached the pipeline, so it has no request id."""
    body = errors.server_answer(status, message)
    head = (
        "HTTP/1.1 %d %s\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (status, reason, len(body))
    )
    gunicorn_util.write_nonblock(sock, head.encode("latin1") + body)


def tune_gc():
    """Keep the cyclic GC off the request path.

    The long-lived start-up heap (oslo, SQLAlchemy, jsonschema) moves to
    the permanent generation, so full collections no longer walk it; a
    larger first threshold spares big responses (hundreds of thousands of
    short-lived tuples and dicts) dozens of collections. Measured on the
    flat 1000-provider candidate request: 155 ms -> 97 ms median. The
    threshold counts tracked objects allocated minus those freed, so a
    request that never holds that many at once is not collected at all:
    100,000 leaves out the nested 1,000-tree request (about 55,000 at its
    peak), which paid a 4-9 ms collection of its own live objects at
    50,000.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 100)


def limit_malloc_arenas():
    """Hold the workers to MALLOC_ARENAS glibc malloc arenas.

    By default glibc gives threads up to 8 arenas per core. A worker's
    threads take turns building answers of a megabyte or more, each in
    the arena its thread landed on, and freed memory in one arena is never
    reused by another: a worker serving a busy day grew by 7 MiB a minute
    without end (Python's own allocations stayed flat). With two arenas
    it levels off after warm-up (doc/operations.md "Memory"). Python runs
    one thread at a time, so the arenas' locks are not contended. Set in
    the master before the fork, so every worker inherits it; an operator's
    own MALLOC_ARENA_MAX wins. Returns whether the limit was set.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (musl, macOS)
        return False
    return bool(mallopt(M_ARENA_MAX, MALLOC_ARENAS))


def _check_port(host, port):
    """A port already taken is one line now, not gunicorn's five retries
    of ERROR lines."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise placement_conf.StartupError(
            "cannot listen on %s: %s; correct --host" % (host, e.strerror)
        )
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            raise placement_conf.StartupError(
                "cannot listen on %s port %d (%s): stop what listens there, "
                "or choose another port with --port" % (host, port, e.strerror)
            )


def _claim_metrics():
    try:
        owner = multiproc.claim()
    except ValueError as e:
        raise placement_conf.StartupError(str(e))
    if not owner:
        LOG.warning(
            "%s %s is in use by another running placement-api: its metrics "
            "files are left as they are, and /metrics of both servers adds "
            "them up; give each server its own directory",
            multiproc.ENV,
            os.environ[multiproc.ENV],
        )


def main(argv=None):
    conf = placement_conf.command_conf()
    conf.register_cli_opts(serve_opts)
    argv = sys.argv[1:] if argv is None else argv
    try:
        placement_conf.parse_args(conf, argv, description=DESCRIPTION)
        if conf.workers is None:
            conf.set_default("workers", usable_cpus())
        startup.setup_logging(conf)
        deploy.log_summary(
            conf,
            ", %d workers x %d threads (%s active per worker), listening on "
            "%s:%d with %s"
            % (
                conf.workers,
                conf.threads,
                conf.active or "all",
                conf.host,
                conf.port,
                conf.server,
            ),
        )
        _check_port(conf.host, conf.port)
        _claim_metrics()
        db = startup.make_database(conf)
        startup.prepare_schema(db, sync=conf.db_sync or db.dialect == "sqlite")
    except placement_conf.StartupError as e:
        return startup.fail("placement-api", e, argv)
    if conf.server == "granian":
        served = build_served_app(conf, db)
        granian_server.serve(
            conf,
            served,
            lambda: worker_ready(conf, db, served),
            # Not a read that would compare the catalog first: that may
            # read it whole, too long to hold the event loop.
            lambda: not refresh.compares_first(db),
        )
        return 0
    # The workers' error path looks the function up in gunicorn.util.
    gunicorn_util.write_error = write_json_error
    Server(conf, db).run()
    return 0
