"""Start-up: configuration, database, policy, standard names, pipeline."""
import logging
import sys

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
        _LOGGING_SET_UP = True


def make_database(conf):
    engine = db_api.create_engine(db_api.build_url(conf), conf)
    return db_api.Database(engine)


def build_app(conf, db=None, sync_schema=None):
    """The WSGI application for ``conf`` (already parsed)."""
    db = db or make_database(conf)
    policy.get_enforcer(conf)
    if sync_schema if sync_schema is not None else conf.placement_database.sync_on_startup:
        schema.upgrade(db.engine)
    schema.sync_standard_names(db)
    return api_app.build_pipeline(conf, db)


def loadapp(argv=None):
    conf = placement_conf.CONF
    if not conf._args and argv is None:
        placement_conf.parse_args([])
    elif argv is not None:
        placement_conf.parse_args(argv)
    oslo_log.register_options(conf) if "debug" not in conf else None
    setup_logging(conf)
    return build_app(conf)
