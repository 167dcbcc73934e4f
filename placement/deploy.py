"""Start-up of the app: its pipeline, built on a database ``startup``
made ready, the line its log starts with and the catalog read ahead of
requests. The commands that build no app (placement-manage,
placement-status) import ``startup`` alone.
"""

import importlib.metadata
import logging
import time

import sqlalchemy as sa

from placement import conf as placement_conf
from placement import schemas
from placement import startup
from placement.api import app as api_app
from placement.db import api as db_api
from placement.objects.catalog import refresh
from placement.web import request

LOG = logging.getLogger(__name__)
# [profiler] hmac_keys's default: a key every client knows.
OSPROFILER_DEFAULT_KEY = "SECRET_KEY"


def version():
    try:
        return importlib.metadata.version("placement-py")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def shown_url(conf):
    """[placement_database] connection with the password masked."""
    try:
        return db_api.build_url(conf).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(not a URL)"


def log_summary(conf, serving=""):
    """The start-up line an operator checks first, and a warning while
    requests are not authenticated."""
    database = (
        "database %s" % shown_url(conf)
        if conf.placement_database.connection
        else "no [placement_database] connection set"
    )
    LOG.info(
        "placement %s: %s, auth_strategy %s%s",
        version(),
        database,
        conf.api.auth_strategy,
        serving,
    )
    keys = conf.profiler.hmac_keys if conf.profiler.enabled else ""
    if OSPROFILER_DEFAULT_KEY in (key.strip() for key in keys.split(",")):
        LOG.warning(
            "[profiler] hmac_keys holds osprofiler's default key %s: anyone "
            "can have requests traced; set a secret key shared with nova",
            OSPROFILER_DEFAULT_KEY,
        )
    if conf.api.auth_strategy == "noauth2":
        LOG.warning(
            "auth_strategy is noauth2: requests are NOT authenticated; "
            "the client's headers are trusted as sent: X-Auth-Token as "
            "user[:project], X-Roles as its roles (X-Roles: admin opens "
            "every call), X-User-Id/X-Project-Id/X-Tenant-Id as its "
            "identity; use keystone in production"
        )


def build_app(conf, db=None, sync_schema=None):
    """The WSGI application for ``conf`` (already parsed). Without ``db``
    it connects and checks the schema (or upgrades it: ``sync_schema``,
    default [placement_database] sync_on_startup) first; a given ``db`` is
    ready (placement-api prepares it once before forking its workers) and
    opened for ``conf``: the app reads no other configuration."""
    placement_conf.check_combinations(conf)
    if db is None:
        db = startup.make_database(conf)
        if sync_schema is None:
            sync_schema = conf.placement_database.sync_on_startup
        startup.prepare_schema(db, sync_schema)
        # This process serves from its own database: the provider catalog
        # is read before it takes requests.
        refresh.warm(db)
    # The request schemas' checks, compiled before any request (in
    # placement-api's master: shared with the workers it forks).
    request.compile_checks(schemas.request_schemas())
    return api_app.build_pipeline(conf, db)


def loadapp(conf, argv=()):
    """Parse the configuration into ``conf`` (a ``command_conf``; ``argv``
    holds command-line options, the WSGI entry point has none), set up
    logging and build the app."""
    placement_conf.parse_args(conf, list(argv))
    startup.setup_logging(conf)
    log_summary(conf)
    return build_app(conf)


def warm_catalog(db):
    """Read the provider catalog ahead of requests, if the database lets
    us now. It must never stop a worker: gunicorn halts the whole server
    when a worker fails to boot, so a worker replaced while the database
    is down would take the service with it. The first request reads the
    catalog instead (or answers 503 while the database is away)."""
    started = time.monotonic()
    try:
        providers = refresh.warm(db)
    except Exception as e:
        LOG.warning(
            "provider catalog not read ahead of requests (%s); the first "
            "request reads it",
            type(e).__name__,
        )
        return
    if providers is not None:
        LOG.info(
            "provider catalog: %d providers, brought up to date in %.3f s;"
            " change log: %s",
            providers,
            time.monotonic() - started,
            refresh.mode(db),
        )
