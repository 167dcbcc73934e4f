"""Configuration options (oslo.config).

Every option can be set in ``placement.conf`` or through an
``OS_<GROUP>__<OPTION>`` environment variable (oslo.config's environment
source). ``list_opts`` feeds ``oslo-config-generator`` (see
``etc/placement/config-generator.conf``), ``set_lib_defaults`` gives the
libraries placement's own defaults there.

Nothing is registered on a global: ``register_opts`` puts every option the
app reads on the ``ConfigOpts`` it is given (another project embedding the
app in its tests brings its own, beside its own global ``cfg.CONF``), and
``command_conf`` makes the one a command or the WSGI entry point parses.
"""

import glob
import os
import re

from oslo_config import cfg
from oslo_log import _options as oslo_log_options
from oslo_log import log as oslo_log
from oslo_middleware import cors
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import sizelimit
from oslo_policy import opts as policy_opts

# Headers a browser may send / read, beyond the CORS "simple" ones.
CORS_ALLOW_HEADERS = [
    "X-Auth-Token",
    "X-Openstack-Request-Id",
    "X-Identity-Status",
    "X-Roles",
    "X-Service-Catalog",
    "X-User-Id",
    "X-Tenant-Id",
    "OpenStack-API-Version",
]
CORS_EXPOSE_HEADERS = [
    "X-Auth-Token",
    "X-Openstack-Request-Id",
    "X-Subject-Token",
    "X-Service-Token",
    "OpenStack-API-Version",
]
CORS_ALLOW_METHODS = ["GET", "PUT", "POST", "DELETE", "PATCH"]
# Larger than any request body clients send (a reshape of a big tree is
# tens of KiB), small enough that a worker never parses megabytes of JSON.
MAX_REQUEST_BODY_SIZE = 1024 * 1024


default_opts = [
    cfg.StrOpt(
        "pybasedir",
        default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..")),
        sample_default="<Path>",
        help="Directory where the placement python module is installed.",
    ),
    cfg.StrOpt(
        "state_path",
        default="$pybasedir",
        help="Top-level directory for maintaining state.",
    ),
    cfg.StrOpt("tempdir", help="Explicitly specify the temporary working directory."),
    cfg.BoolOpt(
        "log_options",
        default=True,
        help="Log all option values at DEBUG level on start-up.",
    ),
]

api_opts = [
    cfg.StrOpt(
        "auth_strategy",
        default="keystone",
        choices=[
            ("keystone", "Use keystonemiddleware auth_token."),
            ("noauth2", "Development mode: trust X-Auth-Token as user[:project]."),
        ],
        deprecated_group="DEFAULT",
        help="Authentication strategy used by the API.",
    ),
]

placement_opts = [
    cfg.BoolOpt(
        "randomize_allocation_candidates",
        default=False,
        help="Randomize the order of allocation candidates (and take a "
        "random sample when a limit applies). Only with "
        "allocation_candidates_order = id.",
    ),
    cfg.StrOpt(
        "allocation_candidates_order",
        default="id",
        choices=[
            (
                "id",
                "By root provider id (the oldest trees first), as upstream "
                "answers; randomize_allocation_candidates shuffles it.",
            ),
            (
                "spread",
                "The trees with the most free capacity of the requested "
                "classes first (the lowest mean over those classes of the "
                "used share of the tree's capacity), then by root id.",
            ),
            (
                "pack",
                "The fullest trees that still fit the request first (the "
                "highest mean used share), then by root id.",
            ),
        ],
        help="The order in which allocation candidates come, tree by "
        "tree, and so which trees a request's 'limit' keeps: with spread "
        "or pack, limit=N holds the best N trees of the whole cloud by "
        "that order. Within a tree the candidates keep their order. "
        "spread and pack read the usage of every provider of the "
        "requested classes to rank the trees (one statement; see "
        "allocation_candidates_order_age). Refused at start-up with "
        "randomize_allocation_candidates.",
    ),
    cfg.FloatOpt(
        "allocation_candidates_order_age",
        default=1.0,
        min=0.0,
        help="With allocation_candidates_order spread or pack, how many "
        "seconds a worker ranks the trees for a limited request with the "
        "ranking a request of the same resources made before, instead of "
        "reading the usage of every provider again (at 100,000 hosts that "
        "read costs 15 times the rest of a limit=1000 answer). The trees read "
        "are still ordered, and judged for room, at the usage of the "
        "request's own transaction: only which trees come first lags, by "
        "at most this much (a tree freed meanwhile may be left out). 0 "
        "ranks every request afresh.",
    ),
    cfg.StrOpt(
        "incomplete_consumer_project_id",
        default="00000000-0000-0000-0000-000000000000",
        help="Project id recorded for consumers written before microversion 1.8.",
    ),
    cfg.StrOpt(
        "incomplete_consumer_user_id",
        default="00000000-0000-0000-0000-000000000000",
        help="User id recorded for consumers written before microversion 1.8.",
    ),
    cfg.IntOpt(
        "allocation_conflict_retry_count",
        default=10,
        min=0,
        help="Server-side retries of an allocation write after a "
        "provider generation conflict before answering 409.",
    ),
    cfg.IntOpt(
        "max_allocation_candidates",
        default=-1,
        min=-1,
        help="Cap on allocation candidates generated per request, "
        "applied before 'limit'. -1 means unlimited.",
    ),
    cfg.IntOpt(
        "max_answer_candidates",
        default=1_000_000,
        min=0,
        help="The most allocation candidates one answer may hold (after "
        "'limit' and max_allocation_candidates). A request whose answer "
        "would hold more is refused with 400 before anything is sent, "
        "asking for 'limit'; deciding counts candidates up to this "
        "number and keeps none of them. With randomize_allocation_"
        "candidates it bounds every candidate found, since all of them "
        "are drawn from. 0 means no bound.",
    ),
    cfg.StrOpt(
        "allocation_candidates_generation_strategy",
        default="depth-first-unless-limit",
        choices=[
            (
                "depth-first-unless-limit",
                "depth-first up to max_allocation_candidates; a request's "
                "'limit' (when max_allocation_candidates is -1) takes its "
                "candidates round-robin from as many roots as possible.",
            ),
            ("depth-first", "Exhaust one root's candidates before the next."),
            ("breadth-first", "Visit roots round-robin."),
        ],
        help="Order in which root providers are visited while "
        "generating allocation candidates, up to "
        "max_allocation_candidates and a request's 'limit'.",
    ),
    cfg.BoolOpt(
        "provider_catalog",
        default=True,
        help="Keep a per-worker in-memory copy of providers, "
        "inventories, traits and aggregates for allocation "
        "candidates and the unfiltered provider list, read "
        "as the worker starts and kept current by the change "
        "log writes add to (usage and "
        "generations are always read from the database). "
        "Costs memory in proportion to the number of "
        "providers; False reads everything per request.",
    ),
    cfg.BoolOpt(
        "host_answers",
        default=True,
        help="Let the workers of one placement-api share the allocation "
        "candidates answers they render: a worker asked a question "
        "another worker answered (the same microversion and query "
        "string), whose own look at the database finds the state that "
        "answer was made at, sends its bytes instead of searching. Only "
        "answers without a limit, in the id order, not randomized, with "
        "the provider catalog and the change-log triggers. Kept in files "
        "under /dev/shm (else the temporary directory): at most 64 "
        "answers and 64 MiB, none over 8 MiB, those of one database "
        "state only.",
    ),
]

workarounds_opts = [
    cfg.BoolOpt(
        "optimize_for_wide_provider_trees",
        default=False,
        help="Accepted for compatibility; candidate generation always "
        "prunes partial combinations that cannot fit.",
    ),
]

database_opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help="SQLAlchemy URL of the placement database. Required: "
        "the service and placement-manage refuse to run "
        "without it.",
    ),
    cfg.StrOpt(
        "connection_parameters",
        default="",
        help="Extra query parameters appended to the connection URL.",
    ),
    cfg.BoolOpt(
        "sqlite_synchronous",
        default=True,
        help="If False, SQLite writes do not wait for fsync.",
    ),
    cfg.StrOpt(
        "slave_connection",
        secret=True,
        help="SQLAlchemy URL of a read replica (accepted, unused).",
    ),
    cfg.StrOpt(
        "mysql_sql_mode", default="TRADITIONAL", help="SQL mode for MySQL sessions."
    ),
    cfg.IntOpt(
        "wsrep_sync_wait",
        default=1,
        min=0,
        max=15,
        help="On a MariaDB Galera cluster (wsrep_on), the session's "
        "wsrep_sync_wait: 1 (the default) makes every read, and the start "
        "of every write transaction, wait until this node has applied what "
        "the cluster committed before it, so a request through any API "
        "host sees every write acknowledged by another one, "
        "including the change count that tells a worker its provider "
        "catalog is out of date. 0 reads without waiting (possibly stale "
        "for a moment; writes are still certified, so stale generations "
        "are refused). Ignored on servers without Galera.",
    ),
    cfg.FloatOpt(
        "statement_timeout",
        default=30.0,
        min=0,
        help="Seconds one database statement may run (its lock waits "
        "included) before the database cancels it: PostgreSQL's "
        "statement_timeout, MariaDB's max_statement_time, MySQL's "
        "max_execution_time (MySQL bounds only reads). A request whose "
        "statement is cancelled answers 503 with Retry-After and writes "
        "nothing; no worker waits longer on a runaway statement. 0 "
        "disables the budget. Not applied to SQLite, nor to "
        "placement-manage db sync and downgrade.",
    ),
    cfg.IntOpt(
        "connection_recycle_time",
        default=3600,
        help="Seconds after which pooled connections are recycled.",
    ),
    cfg.IntOpt(
        "max_pool_size",
        default=None,
        help="Connection pool size, of each of a worker's two pools "
        "(transactions; reads of one statement, in autocommit).",
    ),
    cfg.IntOpt(
        "max_retries", default=10, help="Connection attempts at start-up (-1 forever)."
    ),
    cfg.IntOpt(
        "retry_interval",
        default=10,
        help="Seconds between connection attempts at start-up.",
    ),
    cfg.IntOpt(
        "max_overflow",
        default=None,
        help="Pool overflow connections, of each of a worker's two pools.",
    ),
    cfg.IntOpt(
        "connection_debug",
        default=0,
        min=0,
        max=100,
        help="SQL debugging verbosity: 0 none, 100 everything.",
    ),
    cfg.BoolOpt(
        "connection_trace",
        default=False,
        help="Add Python stack traces to SQL as comment strings.",
    ),
    cfg.IntOpt(
        "pool_timeout", default=None, help="Seconds to wait for a pooled connection."
    ),
    cfg.BoolOpt(
        "sync_on_startup",
        default=False,
        help="Upgrade the schema to the latest revision when the web "
        "application starts.",
    ),
]

# oslo.policy >= 6 always enforces scope; placement keeps the documented
# switch (policy.authorize honours it).
policy_scope_opts = [
    cfg.BoolOpt(
        "enforce_scope",
        default=True,
        help="Fail every rule declaring scope_types=['project'] for "
        "tokens that are not project-scoped. False ignores "
        "scope mismatches.",
    ),
]

ui_opts = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Serve the read-only operator console at /ui/ (static pages "
        "that call this API with the token the operator signs in with; "
        "doc/console.md). False: /ui/ answers 404.",
    ),
]

capacity_opts = [
    cfg.StrOpt(
        "shapes",
        default="",
        help="Request shapes whose capacity GET /metrics exports, as "
        "'name:query; name:query', each query that of GET "
        "/allocation_candidates, e.g. 'm1.small:resources=VCPU:1,"
        "MEMORY_MB:2048,DISK_GB:20; gpu:resources=VCPU:8&resources1=VGPU:1'. "
        "Exported as placement_capacity{shape} and "
        "placement_capacity_aggregate{shape,aggregate} (no per-host "
        "series). Empty: none.",
    ),
    cfg.IntOpt(
        "interval",
        default=60,
        min=1,
        help="Seconds between two computations of the capacity gauges: "
        "one worker computes them in the background, scrapes read the "
        "last result.",
    ),
]

GROUPS = {
    "DEFAULT": default_opts,
    "capacity": capacity_opts,
    "api": api_opts,
    "placement": placement_opts,
    "workarounds": workarounds_opts,
    "placement_database": database_opts,
    "oslo_policy": policy_scope_opts,
    "ui": ui_opts,
}


# Library options the app reads (the pipeline's CORS, proxy headers and
# body size limit), registered with placement's own so that a config file
# or OS_<GROUP>__<OPTION> variable sets them like placement's.
LIB_GROUPS = {
    "cors": cors.CORS_OPTS,
    "oslo_middleware": http_proxy_to_wsgi.OPTS + sizelimit.OPTS,
}


PROFILER_WITHOUT_OSPROFILER = cfg.BoolOpt(
    "enabled",
    default=False,
    help="Join the traces of other services (osprofiler); needs osprofiler "
    "installed (pip install 'placement-py[profiler]').",
)


def profiler_groups():
    """[profiler] and its drivers' groups: osprofiler's own options, which
    osprofiler also registers on oslo.config's global when imported (as
    oslo.middleware does with its own). Without osprofiler (an optional
    dependency: the ``profiler`` extra) only ``enabled`` is known, so that
    ``check_profiler`` can refuse a configuration that asks for tracing."""
    try:
        from osprofiler import opts as profiler_opts
    except ImportError:
        return {"profiler": [PROFILER_WITHOUT_OSPROFILER]}
    return dict(profiler_opts.list_opts())


# Placement's defaults for library options: (the library's options, their
# group, {option: default}).
LIB_DEFAULTS = [
    (
        cors.CORS_OPTS,
        "cors",
        {
            "allow_headers": CORS_ALLOW_HEADERS,
            "expose_headers": CORS_EXPOSE_HEADERS,
            "allow_methods": CORS_ALLOW_METHODS,
        },
    ),
    (
        sizelimit.OPTS,
        "oslo_middleware",
        {"max_request_body_size": MAX_REQUEST_BODY_SIZE},
    ),
]
# alembic announces each of its plugins at INFO on every schema run.
LOG_DEFAULTS = (
    oslo_log_options.log_opts,
    None,
    {
        "default_log_levels": oslo_log.get_default_log_levels()
        + ["alembic.runtime.plugins=WARN"]
    },
)


def register_opts(conf):
    """Register every option the app reads on ``conf``: placement's own,
    the libraries' of ``LIB_GROUPS``, osprofiler's and oslo.policy's, with
    placement's defaults for those (on ``conf`` alone). Registering again
    is a no-op."""
    for group, opts in GROUPS.items():
        conf.register_opts(opts, group=None if group == "DEFAULT" else group)
    for group, opts in (LIB_GROUPS | profiler_groups()).items():
        conf.register_opts(opts, group=group)
    policy_opts.set_defaults(conf)
    _set_defaults(conf, LIB_DEFAULTS)


def command_conf():
    """A new ConfigOpts for a command or the WSGI entry point: what
    ``register_opts`` registers, plus oslo.log's options. Only ``--debug``
    of those is on the command line: the other logging options belong in
    placement.conf and would bury each command's own options in --help."""
    conf = cfg.ConfigOpts()
    register_opts(conf)
    oslo_log.register_options(conf)
    # (oslo_log._options is the module oslo.log's own option entry point
    # names.)
    conf.unregister_opts(oslo_log_options.logging_cli_opts)
    conf.register_opts(oslo_log_options.logging_cli_opts)
    _set_defaults(conf, [LOG_DEFAULTS])
    return conf


def _set_defaults(conf, table):
    for _opts, group, defaults in table:
        for name, value in defaults.items():
            conf.set_default(name, value, group=group)


def list_opts():
    return [(None if g == "DEFAULT" else g, opts) for g, opts in GROUPS.items()]


def set_lib_defaults():
    """Placement's defaults for library options, on the libraries' option
    objects themselves: oslo-config-generator's ``oslo.config.opts.defaults``
    hook, so that the sample shows them. The service sets them on its own
    ConfigOpts instead (``register_opts``)."""
    for opts, _group, defaults in LIB_DEFAULTS + [LOG_DEFAULTS]:
        cfg.set_defaults(opts, **defaults)


# Where oslo.config looks when neither --config-file nor
# OS_PLACEMENT_CONFIG_DIR says otherwise (for --help).
DEFAULT_CONFIG_HELP = (
    "Configuration: --config-file/--config-dir, else "
    "$OS_PLACEMENT_CONFIG_DIR/placement.conf when that variable is set, else "
    "the first placement.conf found in ~/.placement, ~, /etc/placement, /etc. "
    "OS_<GROUP>__<OPTION> environment variables override any option."
)


class StartupError(Exception):
    """A problem the operator has to fix before the command can run. The
    message names the problem and the fix on one line."""


class MissingConnection(StartupError):
    """[placement_database] connection is required and was not given."""


def database_connection(conf):
    if not conf.placement_database.connection:
        raise MissingConnection(
            "[placement_database] connection is not set; configure it in "
            "placement.conf or OS_PLACEMENT_DATABASE__CONNECTION"
        )
    return conf.placement_database.connection


def register_keystone_opts(conf):
    """[keystone_authtoken] and friends, only when keystone authenticates:
    keystonemiddleware takes a large share of start-up to import."""
    from keystonemiddleware import auth_token

    for group, opts in auth_token.list_opts():
        conf.register_opts(opts, group=group)


def parse_args(conf, argv, default_config_files=None, description=None):
    """Load configuration for the WSGI app or a command, and check every
    value now: a bad one raises StartupError naming the option and where
    it was set, instead of failing on first use.

    A non-empty OS_PLACEMENT_CONFIG_DIR replaces oslo.config's default
    search (/etc/placement/placement.conf, ...) with the file it holds.
    """
    if default_config_files is None:
        config_dir = os.environ.get("OS_PLACEMENT_CONFIG_DIR")
        if config_dir:
            default_config_files = [os.path.join(config_dir, "placement.conf")]
    try:
        conf(
            argv,
            project="placement",
            default_config_files=default_config_files,
            description=description,
        )
    except cfg.ConfigFilesNotFoundError as e:
        raise StartupError(
            "configuration file not found: %s; give an existing file to "
            "--config-file" % ", ".join(e.config_files)
        )
    except cfg.Error as e:
        raise StartupError("configuration error: %s" % e)
    check_values(conf)
    check_combinations(conf)
    check_profiler(conf)
    if conf.api.auth_strategy == "keystone":
        register_keystone_opts(conf)
        check_values(conf)


def unknown_options(conf):
    """(file, group, option) of every option the configuration files set
    that its group does not define (a typo such as ``conection``). Groups
    nothing registered (e.g. [keystone_authtoken] under noauth2) are not
    judged."""
    files = list(conf.config_file or ())
    directories = conf.config_dir or ()
    if isinstance(directories, str):
        directories = [directories]
    for directory in directories:
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    found = []
    for path in files:
        sections: dict = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue  # parse_args has read it: nothing more to say here
        for section, options in sections.items():
            known = _option_names(conf, section)
            if known is None:
                continue
            found.extend((path, section, name) for name in options if name not in known)
    return found


def _option_names(conf, section):
    """Every name (and deprecated name) an option of ``section`` may be set
    by; None for a group nothing registered."""
    group = None if section == "DEFAULT" else section
    if group is not None and group not in conf:
        return None
    opts = conf._groups[group]._opts if group else conf._opts  # noqa: SLF001
    names = set()
    for info in opts.values():
        opt = info["opt"]
        names.add(opt.dest)
        names.add(opt.name.replace("-", "_"))
        for old in opt.deprecated_opts:
            if old.group in (None, section):
                names.add((old.name or opt.name).replace("-", "_"))
    return names


def check_profiler(conf):
    """Tracing asked for without osprofiler installed (``profiler_groups``
    then registered ``enabled`` alone)."""
    if "profiler" not in conf or not conf.profiler.enabled:
        return
    if "trace_sqlalchemy" not in conf.profiler:
        raise StartupError(
            "[profiler] enabled is True but osprofiler is not installed: "
            "install it (pip install 'placement-py[profiler]') or set "
            "[profiler] enabled = False"
        )


def check_values(conf):
    """Read every option once so that a bad value fails here."""
    for name in list(conf):
        try:
            value = conf[name]
        except ValueError as e:
            raise _invalid(None, name, e)
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            for opt in list(value):
                try:
                    value[opt]
                except ValueError as e:
                    raise _invalid(name, opt, e)


def check_combinations(conf):
    """StartupError for options that cannot go together."""
    placement = conf.placement
    if (
        placement.randomize_allocation_candidates
        and placement.allocation_candidates_order != "id"
    ):
        raise StartupError(
            "[placement] randomize_allocation_candidates = True and "
            "allocation_candidates_order = %s cannot go together: a random "
            "order is no %s order; set one of them only"
            % ((placement.allocation_candidates_order,) * 2)
        )


def _invalid(group, name, error):
    # oslo.config says where the value came from only inside its message.
    message = str(error)
    where = re.search(r"detail='([^']+)'", message)
    return StartupError(
        "invalid value for [%s] %s%s: %s; correct it, or remove it to use "
        "the default"
        % (
            group or "DEFAULT",
            name,
            " (set in %s)" % where.group(1) if where else "",
            message.rsplit(" is not valid: ", 1)[-1],
        )
    )
