"""Backups as operators take and restore them, for tests of a restore
under a running service: ``mysqldump --single-transaction`` replayed by
the ``mysql`` client (tables dropped and created again, auto-increment
counters back to the dump's), ``pg_dump --clean`` replayed by ``psql``
(sequences set back), and on SQLite the file copied back in place with
SQLite's online backup (what the ``sqlite3`` shell's ``.backup`` and
``.restore`` do; a copy moved over the file is another file, which the
service refuses, tests/functional/test_sqlite_file.py)."""

import contextlib
import os
import sqlite3
import subprocess
import tempfile

import sqlalchemy as sa


def _client_args(url):
    return [
        "-h",
        url.host or "127.0.0.1",
        "-P" if url.get_backend_name() == "mysql" else "-p",
        str(url.port or (3306 if url.get_backend_name() == "mysql" else 5432)),
        "-u" if url.get_backend_name() == "mysql" else "-U",
        url.username or "root",
    ]


def dump(url) -> bytes | str:
    """A backup of the database at ``url`` (a URL or its string), taken
    while the service may be writing."""
    url = sa.make_url(url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        fd, path = tempfile.mkstemp(prefix="placement-backup-", suffix=".sqlite")
        os.close(fd)
        with _sqlite(url.database) as live, _sqlite(path) as copy:
            live.backup(copy)
        return path
    if backend == "mysql":
        cmd = ["mysqldump", "--single-transaction", *_client_args(url), url.database]
    else:
        cmd = ["pg_dump", "--clean", "--if-exists", *_client_args(url), url.database]
    return subprocess.run(cmd, check=True, capture_output=True).stdout


def restore(url, backup) -> None:
    """``backup`` (from ``dump``) in place of the database at ``url``."""
    url = sa.make_url(url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        with _sqlite(backup) as copy, _sqlite(url.database) as live:
            copy.backup(live)
        return
    if backend == "mysql":
        cmd = ["mysql", *_client_args(url), url.database]
    else:
        # In one transaction: dropping the tables one by one deadlocks
        # with a running service's reads of several at times, which psql
        # then reports after it has dropped some; all or nothing, tried
        # again, as an operator would.
        cmd = ["psql", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction"]
        cmd += [*_client_args(url), url.database]
    for attempt in range(RESTORE_TRIES):
        done = subprocess.run(cmd, input=backup, capture_output=True)
        if done.returncode == 0:
            return
        if b"deadlock detected" not in done.stderr or attempt == RESTORE_TRIES - 1:
            raise AssertionError("restore failed: %s" % done.stderr.decode())


RESTORE_TRIES = 5


def _sqlite(path):
    return contextlib.closing(sqlite3.connect(path, timeout=30))
