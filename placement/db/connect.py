"""The database URL of a configuration, and what a first connection's
failure means (worth waiting for, or what to correct).
"""

from typing import Any

import sqlalchemy as sa
from oslo_config import cfg


def build_url(conf: cfg.ConfigOpts) -> sa.engine.URL:
    url = conf.placement_database.connection
    params = conf.placement_database.connection_parameters
    if params:
        url += ("&" if "?" in url else "?") + params
    return sa.engine.make_url(url)


# MySQL server errors at connect time that waiting does not fix.
_MYSQL_UNKNOWN_DATABASE = 1049
_MYSQL_ACCESS_DENIED = (1044, 1045, 1698)
# Words of a refused, reset or timed-out connection, in every driver's
# messages: a host that is down, starting or behind a proxy whose backend
# is down, which waiting may fix. (PyMySQL reports a reset as a lost
# connection; psycopg as a server that closed the connection.)
_TRANSIENT = (
    "connection refused",
    "connection reset",
    "lost connection",
    "closed the connection unexpectedly",
    "timed out",
    "timeout",
)


# A driver -> its error numbers of a connection refused or unreachable,
# which waiting may fix, where its message has none of the words above
# (libmariadb: "Can't connect to server on 'HOST' (115)"; an unknown
# host is 2005). PyMySQL's 2003 is an unknown host too: its words tell.
_TRANSIENT_CODES = {"mysqldb": (2002, 2003)}


def connect_problem(error: BaseException, url: sa.engine.URL) -> tuple[bool, str]:
    """(worth retrying, one line saying what is wrong and what to do) for
    the DBAPIError of a first connection to ``url``."""
    orig = getattr(error, "orig", None) or error
    args: tuple[Any, ...] = getattr(orig, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    # One line: psycopg's messages run over several.
    text = " ".join(
        str(args[1] if code is not None and len(args) > 1 else orig).split()
    )
    shown = url.render_as_string(hide_password=True)
    if code == _MYSQL_UNKNOWN_DATABASE:
        return False, (
            "database %r does not exist on %s: create it (CREATE DATABASE %s "
            "CHARACTER SET utf8mb4) or correct [placement_database] connection"
            % (url.database, url.host, url.database)
        )
    if code in _MYSQL_ACCESS_DENIED:
        return False, (
            "access denied to %s (%s): check the user and password in "
            "[placement_database] connection and the user's GRANT on the "
            "database" % (shown, text)
        )
    if url.get_backend_name() == "sqlite" and "not a database" in text:
        return False, (
            "%s is not a SQLite database (%s): point [placement_database] "
            "connection at a placement database file, or at a new path"
            % (url.database, text)
        )
    if url.get_backend_name() == "sqlite":
        return False, (
            "cannot open the SQLite database %s (%s): its directory must "
            "exist and be writable by this user" % (url.database, text)
        )
    if any(word in text.lower() for word in _TRANSIENT):
        return True, text
    if code in _TRANSIENT_CODES.get(url.get_driver_name(), ()):
        return True, text
    return (
        False,
        "cannot connect to %s (%s): correct [placement_database] connection"
        % (
            shown,
            text,
        ),
    )
