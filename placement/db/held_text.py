"""``at_commit``: a write transaction's last statements, which nothing
reads, held back for its COMMIT (``held``) as text made the way
SQLAlchemy would send them, without a SQLAlchemy execution each.

Every write that registers a host holds three to five statements (the
generation move, its rows, the catalog's count and log): a SQLAlchemy
execution of one (its cache key, execution context, events and result)
cost about twice what making its text costs, only for the statement to
be mogrified (``held``) and never run on its own. A statement held a
second time (one built once: a module's, or a cached one) is compiled
once more, here, for its dialect and parameter names, and from then on
its text is made from that as ``conn.execute`` makes it: the compiled
parameters, the columns' Python defaults (``created_at``, ``updated_at``),
the types' bind processors, mogrified on the driver's cursor. The cursor
listeners see it without an execution context (``plain_rows``); the
writes it makes are told to the ``watch_held`` hooks instead (the
catalog's check that every write records what it changed). A statement
built anew for each write, one whose compiled text changes with its
values (an ``IN`` list) or that this does not make the same way (a
default that is SQL, RETURNING) goes through ``conn.execute``, as
everything does where nothing is held (SQLite, PostgreSQL, Galera).
"""

import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import compiler as sa_compiler

from placement.db import held
from placement.db import statements

# Called with (conn, compiled) for each statement held here (the
# after_cursor_execute listeners see it without an execution context,
# hence without its compiled form).
_WATCHERS: list[Callable[[sa.Connection, sa_compiler.SQLCompiler], None]] = []

W = Callable[[sa.Connection, sa_compiler.SQLCompiler], None]


def watch_held(hook: W) -> W:
    """Register ``hook(conn, compiled)``, told of every INSERT, UPDATE or
    DELETE that ``at_commit`` holds without an execution context (its
    ``compiled`` form: the statement, what kind it is). A decorator."""
    _WATCHERS.append(hook)
    return hook


class _Text:
    """A statement compiled for one dialect and one set of parameter
    names: what is needed to make its text for given values."""

    __slots__ = ("compiled", "text", "defaults", "processors", "escaped")

    def __init__(self, compiled: Any, defaults: tuple, processors: Any) -> None:
        self.compiled = compiled
        self.text = compiled.string
        self.defaults = defaults  # ((parameter, value or function, called),)
        self.processors = processors  # {parameter: bind processor}
        self.escaped = compiled.escaped_bind_names  # {parameter: its name}


# {statement: {(dialect, parameter names, several): _Text or None}}: a
# statement seen once maps to None, a statement held a second time to
# its texts (None for one made through conn.execute). Weak: statements
# built anew for each write go with it.
_SEEN: "weakref.WeakKeyDictionary[Any, dict | None]" = weakref.WeakKeyDictionary()


def at_commit(
    conn: sa.Connection, statement: sa.Executable, parameters: Any = None
) -> None:
    """``held.at_commit``: execute ``statement`` as one of the write
    transaction's last (on MySQL sent with the COMMIT, elsewhere at once),
    a statement held before made into text without a SQLAlchemy
    execution."""
    hold = held.held_list(conn)
    rows = parameters if isinstance(parameters, list) else [parameters or {}]
    if hold is not None and rows:
        text = _text(conn.dialect, statement, rows)
        if text is not None:
            _hold(conn, hold, text, rows)
            return
    held.at_commit(conn, statement, parameters)


def _text(dialect: sa.Dialect, statement: Any, rows: list) -> "_Text | None":
    """``statement``'s ``_Text`` for ``rows`` (their names), None when it
    is held for the first time or its text is made by ``conn.execute``."""
    texts: Any
    try:
        texts = _SEEN.get(statement, False)
        if texts is False:
            _SEEN[statement] = None  # seen once
            return None
    except TypeError:  # not weakly referable
        return None
    if texts is None:
        texts = _SEEN[statement] = {}
    key = (dialect, tuple(sorted(rows[0])), len(rows) > 1)
    text: Any = texts.get(key, False)
    if text is False:
        text = texts[key] = _compile(dialect, statement, key[1], key[2])
    return text


def _compile(
    dialect: sa.Dialect, statement: Any, keys: tuple[str, ...], several: bool
) -> _Text | None:
    """``statement``'s ``_Text`` for ``dialect`` given values of ``keys``
    (for several rows: ``several``), None where its text cannot be made
    as ``conn.execute`` makes it from the compiled one alone."""
    compiled: Any = statement.compile(
        dialect=dialect, column_keys=list(keys), for_executemany=several
    )
    if (
        compiled.literal_execute_params
        or compiled.post_compile_params
        or compiled.positional
        or compiled.schema_translate_map
        or compiled.implicit_returning
        or compiled.effective_returning
        or (several and compiled._insertmanyvalues)
        or not (compiled.isinsert or compiled.isupdate or compiled.isdelete)
    ):
        return None
    prefetch = compiled.insert_prefetch or compiled.update_prefetch
    key_of = compiled._within_exec_param_key_getter
    defaults = []
    for column in prefetch:
        arg, scalar, called, sentinel = (
            column._default_description_tuple
            if compiled.insert_prefetch
            else column._onupdate_description_tuple
        )
        if sentinel or not (scalar or called):
            return None  # a SQL default, a sequence
        defaults.append((key_of(column), arg, called))
    return _Text(compiled, tuple(defaults), compiled._bind_processors)


def _hold(conn: sa.Connection, hold: list[str], text: _Text, rows: list) -> None:
    """Hold ``text``'s statement run with each of ``rows`` for the COMMIT,
    as ``conn.execute`` followed by ``held``'s ``do_execute`` listener
    would."""
    compiled, processors, escaped = text.compiled, text.processors, text.escaped
    bound = []
    for group, row in enumerate(rows):
        params = compiled.construct_params(row, escape_names=False, _group_number=group)
        for key, arg, called in text.defaults:
            # Python defaults take the execution context (none here).
            params[key] = arg(None) if called else arg
        bound.append(
            {
                escaped.get(key, key) if escaped else key: (
                    processors[key](value) if key in processors else value
                )
                for key, value in params.items()
            }
        )
    several = len(bound) > 1
    sent = bound if several else bound[0]
    dialect = conn.dialect
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    try:
        dispatch = conn.dispatch
        for listener in dispatch.before_cursor_execute:
            listener(conn, cursor, text.text, sent, None, several)
        if several:
            hold.extend(held.mogrified(cursor, text.text, bound))
        else:
            hold.append(cursor.mogrify(text.text, sent))
        for listener in dispatch.after_cursor_execute:
            listener(conn, cursor, text.text, sent, None, several)
        cursor.close()
    except dialect.loaded_dbapi.Error as e:
        raise statements._driver_error(conn, e, text.text, sent, cursor) from e
    for watcher in _WATCHERS:
        watcher(conn, compiled)
