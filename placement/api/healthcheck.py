"""``/healthcheck``: oslo.middleware's healthcheck app with a backend that
reports whether the app's database answers and holds the schema this
service expects (alembic's revision, one cheap statement), and whether it
takes writes (a write that changes nothing); its details say how the
provider catalog follows other writers (``refresh.mode``: the change-log
triggers, or the fallback).

The backend is registered as the ``placement_database`` entry point of
``oslo.middleware.healthcheck`` (setup.cfg) and is always enabled; operators
may add more backends and ``detailed`` under ``[healthcheck]``.
"""

import logging
from typing import Any

from oslo_config import cfg
from oslo_middleware import healthcheck
from oslo_middleware.healthcheck import opts as healthcheck_opts
from oslo_middleware.healthcheck import pluginbase

from placement.db import api as db_api
from placement.db import errors as db_errors
from placement.db import schema
from placement.db import sqlite_file
from placement.db import writable
from placement.objects.catalog import refresh

LOG = logging.getLogger(__name__)

HEALTHCHECK_PATH = "/healthcheck"
BACKEND = "placement_database"
# Key of the healthcheck's local conf dict that carries the Database object
# to the backend plugin (stevedore builds it from the conf dict alone).
DB_KEY = "placement_db"


class DatabaseHealthcheck(pluginbase.HealthcheckBaseExtension):
    """Healthy while the database answers and its schema is at this
    service's revision (a dropped database or table, or a schema another
    release wrote, is not healthy); what is amiss meanwhile (``NOTES``: a
    database that refuses writes) is the reason given."""

    def healthcheck(self, server_port: Any) -> Any:
        db = self.conf[DB_KEY]
        try:
            with db.reader() as conn:
                revision = schema.recorded_revision(conn)
            noted = _noted(db) if revision == schema.HEAD else None
            mode = "change log: " + refresh.mode(db)
        except Exception as e:
            if sqlite_file.is_file_removed(e):
                reason, details = "database file removed", str(e)
            elif db_errors.is_schema_missing(e):
                reason, details = "database schema missing", schema.SYNC_HINT
            else:
                reason, details = "database unreachable", str(e)
            LOG.warning("healthcheck: %s: %s", reason, e)
            return pluginbase.HealthcheckResult(
                available=False, reason=reason, details=details
            )
        if revision != schema.HEAD:
            details = "schema revision %s, this placement needs %s" % (
                revision,
                schema.HEAD,
            )
            LOG.warning("healthcheck: %s", details)
            return pluginbase.HealthcheckResult(
                available=False,
                reason="database schema at another revision",
                details=details,
            )
        if noted is not None:
            LOG.warning("healthcheck: %s: %s", *noted)
            return pluginbase.HealthcheckResult(
                available=True, reason=noted[0], details="%s; %s" % (noted[1], mode)
            )
        return pluginbase.HealthcheckResult(
            available=True, reason="database reachable", details=mode
        )


def _noted(db: db_api.Database) -> tuple[str, str] | None:
    return next(filter(None, (note(db) for note in NOTES)), None)


def read_only(db: db_api.Database) -> tuple[str, str] | None:
    refused = writable.refusal(db.engine)
    if refused is None:
        return None
    return READ_ONLY, refused


READ_ONLY = "database read-only: writes are refused"
# What the health check names while the service still answers: each
# ``note(db)`` gives (reason, details) or None, the first one given
# answering. A read-only database is healthy for reads (200): a load
# balancer taking every host out would stop reads too; monitoring alerts
# on the reason. (A catalog answering in a fallback mode belongs here.)
NOTES = (read_only,)


class _Healthcheck(healthcheck.Healthcheck):
    """oslo.middleware's healthcheck app reading the app's ConfigOpts (given
    options as a dict, it would read and override the global ``cfg.CONF``),
    with our backend always first."""

    def __init__(self, conf: cfg.ConfigOpts, db: db_api.Database) -> None:
        super().__init__(None, conf)
        # The backends were handed this (otherwise empty) dict as their
        # local conf when they loaded: ours finds the database there.
        self.conf[DB_KEY] = db

    def _conf_get(self, key: str, group: str = "healthcheck") -> Any:
        value = super()._conf_get(key, group)
        if key == "backends":
            return [BACKEND] + [b for b in value if b != BACKEND]
        return value


def healthcheck_app(conf: cfg.ConfigOpts, db: db_api.Database) -> Any:
    """The healthcheck WSGI app: our backend plus any configured ones."""
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    return _Healthcheck(conf, db)
