"""Start-up: configuration, database, policy, standard names, pipeline."""
import logging
import time

import sqlalchemy as sa
from oslo_log import log as oslo_log

from placement import conf as placement_conf
from placement import policy
from placement.api import app as api_app
from placement.db import api as db_api
from placement.db import schema

LOG = logging.getLogger(__name__)
_LOGGING_SET_UP = False


def setup_logging(conf):
    global _LOGGING_SET_UP
    if not _LOGGING_SET_UP:
        oslo_log.setup(conf, "placement")
        if conf.log_options:
            conf.log_opt_values(LOG, logging.DEBUG)
        _LOGGING_SET_UP = True


def make_database(conf):
    """The configured Database, once it answers ([placement_database]
    max_retries / retry_interval cover a database still starting)."""
    placement_conf.database_connection(conf)
    engine = db_api.create_engine(db_api.build_url(conf), conf)
    dbconf = conf.placement_database
    attempt = 0
    while True:
        try:
            with engine.connect():
                return db_api.Database(engine)
        except sa.exc.OperationalError:
            attempt += 1
            if dbconf.max_retries != -1 and attempt > dbconf.max_retries:
                raise
            LOG.warning("database not reachable, retry %d in %ss", attempt,
                        dbconf.retry_interval)
            time.sleep(dbconf.retry_interval)


def build_app(conf, db=None, sync_schema=None):
    """The WSGI application for ``conf`` (already parsed)."""
    db = db or make_database(conf)
    policy.get_enforcer(conf)
    if sync_schema is None:
        sync_schema = conf.placement_database.sync_on_startup
    if sync_schema:
        schema.upgrade(db.engine)
    schema.sync_standard_names(db)
    return api_app.build_pipeline(conf, db)


def loadapp(argv=()):
    """Parse the configuration (``argv`` holds command-line options; the
    WSGI entry point has none), set up logging and build the app."""
    conf = placement_conf.CONF
    placement_conf.parse_args(list(argv))
    setup_logging(conf)
    return build_app(conf)
