"""Start-up of every command: logging, the database and its schema,
without the app (placement-manage and placement-status build none; the
app's modules, numpy among them, cost them about 1 s of CPU each run).
``deploy`` builds the app on these.

Problems only the operator can fix (a bad option, a database that does not
exist or refuses the credentials, a missing schema) raise
``conf.StartupError`` at once with a one-line message naming the problem
and the fix; the commands print it and exit (see ``fail``). Only a
database host that refuses or resets connections or times out, which may
still be starting, is waited for.
"""

import logging
import os
import sys
import time
import traceback

import sqlalchemy as sa
from oslo_log import formatters
from oslo_log import log as oslo_log

from placement import conf as placement_conf
from placement import logformat
from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names

LOG = logging.getLogger(__name__)
_LOGGING_SET_UP = False
URL_EXAMPLE = (
    "mysql+pymysql://USER:PASSWORD@HOST/placement, "
    "postgresql+psycopg://USER:PASSWORD@HOST/placement or "
    "sqlite:////PATH/placement.sqlite"
)


def setup_logging(conf):
    global _LOGGING_SET_UP
    if not _LOGGING_SET_UP:
        try:
            oslo_log.setup(conf, "placement")
        except OSError as e:
            raise placement_conf.StartupError(
                "cannot write the log file %s (%s): set [DEFAULT] log_file "
                "(or OS_DEFAULT__LOG_FILE) to a writable path, or unset it "
                "to log to standard error" % (e.filename or conf.log_file, e.strerror)
            )
        for handler in logging.getLogger().handlers:
            handler.addFilter(logformat.OneLine())
            if type(handler.formatter) is formatters.ContextFormatter:
                handler.setFormatter(
                    logformat.ContextFormatter(
                        project="placement",
                        version=handler.formatter.version,
                        datefmt=handler.formatter.datefmt,
                        config=conf,
                    )
                )
        if conf.log_options:
            conf.log_opt_values(LOG, logging.DEBUG)
        for path, group, name in placement_conf.unknown_options(conf):
            LOG.warning(
                "%s: [%s] %s is not an option of this service (a typo?); it is ignored",
                path,
                group,
                name,
            )
        _LOGGING_SET_UP = True


def fail(command, error, argv):
    """Report a StartupError as one line on stderr (with the traceback only
    under --debug); the exit status."""
    if "--debug" in argv or "-d" in argv:
        traceback.print_exc()
    print("%s: error: %s" % (command, error), file=sys.stderr)
    return 1


def _engine(conf, existing=False):
    placement_conf.database_connection(conf)
    try:
        url = db_api.build_url(conf)
    except sa.exc.ArgumentError:
        raise placement_conf.StartupError(
            "[placement_database] connection is not a database URL; it looks "
            "like %s" % URL_EXAMPLE
        )
    shown = url.render_as_string(hide_password=True)
    _check_sqlite_path(url, existing)
    try:
        return url, db_api.create_engine(url, conf)
    except sa.exc.NoSuchModuleError:
        raise placement_conf.StartupError(
            "[placement_database] connection %s: unknown database type %r; "
            "use %s" % (shown, url.drivername, URL_EXAMPLE)
        )
    except ImportError as e:
        hint = (
            "; use mysql+pymysql://... (PyMySQL is installed with placement), "
            "or mysql+mysqldb://... with the mysqlclient extra installed "
            "(pip install 'placement-py[mysqlclient]')"
            if url.get_backend_name() == "mysql"
            else ""
        )
        raise placement_conf.StartupError(
            "[placement_database] connection %s needs the Python module %s, "
            "which is not installed%s" % (shown, e.name, hint)
        )
    except OSError as e:
        raise placement_conf.StartupError(
            "cannot create the directory of the SQLite database %s (%s); "
            "create it or choose another path in [placement_database] "
            "connection" % (url.database, e.strerror)
        )


def _check_sqlite_path(url, existing):
    """A relative SQLite path (three slashes) is relative to the working
    directory: say which file that is. ``existing``: a command that only
    reads must not create the file."""
    path = url.database
    if url.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return
    if not os.path.isabs(path):
        LOG.warning(
            "[placement_database] connection names the relative SQLite path "
            "%s: using %s; write sqlite:////%s (four slashes) for an "
            "absolute path",
            path,
            os.path.abspath(path),
            os.path.abspath(path).lstrip("/"),
        )
    if existing and not os.path.exists(path):
        raise placement_conf.StartupError(
            "the SQLite database %s does not exist: correct [placement_database] "
            "connection, or create it with placement-manage db sync"
            % os.path.abspath(path)
        )


def make_database(conf, existing=False):
    """The configured Database, once it answers. A server that refuses or
    resets connections or times out is tried again ([placement_database]
    max_retries / retry_interval); any other failure is a StartupError.
    ``existing``: fail rather than create a missing SQLite file."""
    url, engine = _engine(conf, existing)
    dbconf = conf.placement_database
    attempt = 0
    while True:
        try:
            with engine.connect():
                return db_api.Database(engine, conf)
        except sa.exc.DBAPIError as e:
            retry, problem = db_api.connect_problem(e, url)
        if not retry:
            engine.dispose()
            raise placement_conf.StartupError(problem)
        attempt += 1
        if dbconf.max_retries != -1 and attempt > dbconf.max_retries:
            engine.dispose()
            raise placement_conf.StartupError(
                "database %s still not reachable after %d attempts (%s): the "
                "host did not answer; start the database server or check the "
                "network to it"
                % (url.render_as_string(hide_password=True), attempt, problem)
            )
        # Logged outside the except block: oslo.log would append the
        # exception to the line.
        LOG.warning(
            "database %s not reachable (%s); attempt %d of %s in %ss",
            url.render_as_string(hide_password=True),
            problem,
            attempt + 1,
            "unlimited" if dbconf.max_retries == -1 else dbconf.max_retries + 1,
            dbconf.retry_interval,
        )
        time.sleep(dbconf.retry_interval)


def prepare_schema(db, sync):
    """Upgrade the schema (``sync``) or make sure it is at this placement's
    head; then add the standard traits and resource classes."""
    if sync:
        schema.upgrade(db.engine)
    else:
        problem = schema.mismatch(db.engine)
        if problem:
            raise placement_conf.StartupError(problem)
    standard_names.sync_standard_names(db)
