"""``/healthcheck``: oslo.middleware's healthcheck app with a backend that
reports whether the app's database answers and holds the schema this
service expects (alembic's revision, one cheap statement).

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

LOG = logging.getLogger(__name__)

HEALTHCHECK_PATH = "/healthcheck"
BACKEND = "placement_database"
# Key of the healthcheck's local conf dict that carries the Database object
# to the backend plugin (stevedore builds it from the conf dict alone).
DB_KEY = "placement_db"


class DatabaseHealthcheck(pluginbase.HealthcheckBaseExtension):
    """Healthy while the database answers and its schema is at this
    service's revision (a dropped database or table, or a schema another
    release wrote, is not healthy)."""

    def healthcheck(self, server_port: Any) -> Any:
        try:
            with self.conf[DB_KEY].reader() as conn:
                revision = schema.recorded_revision(conn)
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
        return pluginbase.HealthcheckResult(available=True, reason="database reachable")


def healthcheck_app(conf: cfg.ConfigOpts, db: db_api.Database) -> Any:
    """The healthcheck WSGI app: our backend plus any configured ones."""
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    backends = [BACKEND] + [b for b in conf.healthcheck.backends if b != BACKEND]
    return healthcheck.Healthcheck.app_factory(None, backends=backends, **{DB_KEY: db})
