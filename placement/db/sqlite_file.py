"""The SQLite file at the configured path must stay the one the service
opened.

An open SQLite connection keeps using its file after the file is deleted
or replaced (``rm``, a restore with ``mv``): every write would be
acknowledged into an unlinked file and lost at restart, and a new
connection would create an empty database beside it. So the file's
identity (device and inode) is taken when the engine first connects, and
checked again, one ``stat`` each, before a new connection is opened, when
a connection is checked out of the pool and just before a write commits.
Once it differs, every use fails with ``FileRemoved`` (a 503, and a
failing ``/healthcheck``) until the service is restarted.
"""

import os

import sqlalchemy as sa
from sqlalchemy import event


class FileRemoved(Exception):
    """The SQLite file at the configured path is gone or is another file."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def watch(engine: sa.Engine, path: str) -> None:
    """Refuse every use of ``engine`` once the file at ``path`` is not the
    one its first connection opened."""
    opened: list[tuple[int, int] | None] = []  # the identity, once known

    def check() -> None:
        if opened and _identity(path) != opened[0]:
            raise FileRemoved(
                "the SQLite database file %s was removed or replaced while "
                "the service had it open" % path
            )

    @event.listens_for(engine, "do_connect")
    def _before_connect(dialect, record, cargs, cparams):
        check()  # else SQLite would create a new, empty file

    @event.listens_for(engine, "connect")
    def _connected(dbapi_conn, record):
        if not opened:
            opened.append(_identity(path))

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn, record, proxy):
        check()

    @event.listens_for(engine, "commit")
    def _commit(conn):
        if conn.get_execution_options().get("placement_writer"):
            check()


def is_file_removed(error: BaseException | None) -> bool:
    """True when ``error``, or an error it was raised while handling, is
    ``FileRemoved``."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, FileRemoved):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
