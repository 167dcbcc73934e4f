"""``/healthcheck``: oslo.middleware's healthcheck app with a backend that
reports whether the app's database answers ``SELECT 1``.

The backend is registered as the ``placement_database`` entry point of
``oslo.middleware.healthcheck`` (setup.cfg) and is always enabled; operators
may add more backends and ``detailed`` under ``[healthcheck]``.
"""

import logging
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg
from oslo_middleware import healthcheck
from oslo_middleware.healthcheck import opts as healthcheck_opts
from oslo_middleware.healthcheck import pluginbase

from placement.db import api as db_api

LOG = logging.getLogger(__name__)

HEALTHCHECK_PATH = "/healthcheck"
BACKEND = "placement_database"
# Key of the healthcheck's local conf dict that carries the Database object
# to the backend plugin (stevedore builds it from the conf dict alone).
DB_KEY = "placement_db"


class DatabaseHealthcheck(pluginbase.HealthcheckBaseExtension):
    """Healthy while the database answers ``SELECT 1``."""

    def healthcheck(self, server_port: Any) -> Any:
        try:
            with self.conf[DB_KEY].reader() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as e:
            LOG.warning("healthcheck: database unreachable: %s", e)
            return pluginbase.HealthcheckResult(
                available=False, reason="database unreachable", details=str(e)
            )
        return pluginbase.HealthcheckResult(available=True, reason="database reachable")


def healthcheck_app(conf: cfg.ConfigOpts, db: db_api.Database) -> Any:
    """The healthcheck WSGI app: our backend plus any configured ones."""
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    backends = [BACKEND] + [b for b in conf.healthcheck.backends if b != BACKEND]
    return healthcheck.Healthcheck.app_factory(None, backends=backends, **{DB_KEY: db})
