"""oslo.log's line format, for less work per line.

oslo.log's ContextFormatter asks the request context for its logging
values twice per line, reads its formats from oslo.config on every line
and computes an ISO time (constructing a local time zone) that its
default formats never show: about half of the formatting of a request's
log line. ``ContextFormatter`` here writes the same lines with each done
once, or not at all when unused.

``log`` writes a line without a ``logging.LogRecord`` at all (the access
log's line per request) when every handler it goes to is a plain stream
or file with that formatter; any other handler, filter or format gets
the record as before.
"""

import logging
import logging.handlers
import operator
import re
import sys
import time
import types
import typing
from collections.abc import Callable
from typing import Any

from oslo_context import context as oslo_context
from oslo_log import formatters

from placement import procid

# The options oslo.log's formatter reads on every line; they are read
# once, when logging is set up (oslo.log does not reload them either).
_FORMAT_OPTIONS = (
    "instance_format",
    "instance_uuid_format",
    "logging_context_format_string",
    "logging_debug_format_suffix",
    "logging_default_format_string",
    "logging_exception_prefix",
    "logging_user_identity_format",
)


class OneLine(logging.Filter):
    """Folds a multi-line message (alembic logs each revision's docstring)
    into one line, so that every log entry is one line."""

    def filter(self, record):
        message = record.getMessage()
        if "\n" in message:
            record.msg = " ".join(
                part.strip() for part in message.splitlines() if part.strip()
            )
            record.args = None
        return True


class ContextFormatter(formatters.ContextFormatter):
    def __init__(self, *args, config, **kwargs):
        options = types.SimpleNamespace(
            **{name: getattr(config, name) for name in _FORMAT_OPTIONS}
        )
        super().__init__(*args, config=options, **kwargs)
        self._isotime = any(
            "isotime" in (getattr(options, name) or "")
            for name in _FORMAT_OPTIONS
            if name.startswith("logging_")
        )
        # line()'s: the time's text of the last second, the formats'
        # plans (the options are read once).
        self._second: tuple[int, str] | None = None
        self._plans = {
            fmt: _plan(fmt)
            for fmt in (
                options.logging_context_format_string,
                options.logging_default_format_string,
            )
        }
        self._identity = _plan(options.logging_user_identity_format, identity=True)
        # line()'s plans by format, logger, level and process (_bake).
        self._baked: dict[tuple, _Plan] = {}
        # The identity's text by its values: a server's callers are few
        # (nova's services, an operator), each line's text made again
        # was a quarter of line()'s time.
        self._identities: dict[tuple, str] = {}

    def format(self, record):
        context = record.__dict__.get("context", oslo_context.get_current())
        # oslo.log reads these from a context itself, not from its logging
        # values: such a context is left to it.
        if _plain(context):
            # oslo.log takes a dict as the context's logging values.
            record.context = context.get_logging_values()
        return super().format(record)

    def _compute_iso_time(self, record):
        if self._isotime:
            super()._compute_iso_time(record)

    def line(
        self, name: str, levelno: int, message: str, created: float, context: Any
    ) -> str | None:
        """What ``format`` writes for a record of logger ``name`` at
        ``levelno`` whose message is ``message``, made at ``created``
        (``time.time()``) under the request ``context``, without
        exception; or None for a record whose line takes more than these
        (a context of another kind or naming an instance, a level with a
        suffix or an error summary, an ISO time, fields of the record not
        kept here): the fields are read from the context's attributes, not
        from its logging values."""
        if (
            not logging.DEBUG < levelno < logging.WARNING
            or self._isotime
            or not _plain(context)
            or type(context).get_logging_values is not _LOGGING_VALUES
            or type(context).to_dict is not _TO_DICT
            or self.converter is not time.localtime
        ):
            return None
        conf = self.conf
        identity = self._identity
        if identity is None:
            return None
        key = (
            conf.logging_context_format_string
            if context.request_id
            else conf.logging_default_format_string,
            name,
            levelno,
            procid.current() if logging.logProcesses else None,
        )
        plan = self._baked.get(key)
        if plan is None:
            plan = self._bake(key)
            if plan is None:
                return None
        second = int(created)
        kept = self._second
        if kept is None or kept[0] != second:
            kept = self._second = (
                second,
                time.strftime(
                    self.datefmt or self.default_time_format, time.localtime(second)
                ),
            )
        msecs = int((created - second) * 1000) + 0.0  # as LogRecord's
        asctime = kept[1]
        if not self.datefmt and self.default_msec_format:
            asctime = self.default_msec_format % (asctime, msecs)
        varies = (
            created,
            msecs,
            asctime,
            message,
            self._identity_text(identity, context),
        )
        return plan.text % plan.pick(varies + plan.read(context))

    def _bake(self, key: tuple) -> "_Plan | None":
        """The plan of line()'s lines of a format, logger, level and
        process (``key``): the fields the same on each written into its
        text (``_baked``); None when the format is not line()'s."""
        fmt, name, levelno, process = key
        plan = self._plans[fmt]
        if plan is None:
            return None
        made = (
            name,
            logging.getLevelName(levelno),
            levelno,
            process,
            None,
            None,
            None,
            None,
            self.version,
            None,
            plan.error_summary,
            "",
            "",
            "",
        )
        if len(self._baked) >= _BAKED_MAX:
            self._baked.clear()
        baked = self._baked[key] = _baked(plan, made)
        return baked

    def _identity_text(self, identity: "_Plan", context: Any) -> str:
        """oslo.log's user identity: each value, or "-" for a false one."""
        values = identity.read(context)
        try:
            return self._identities[values]
        except KeyError:
            pass
        except TypeError:  # a value that is not hashable: not kept
            return identity.text % tuple([value or "-" for value in values])
        if len(self._identities) >= _IDENTITIES_MAX:
            self._identities.clear()
        text = self._identities[values] = identity.text % tuple(
            [value or "-" for value in values]
        )
        return text


_IDENTITIES_MAX = 256
_BAKED_MAX = 64


def _plain(context):
    """A context whose logging values are all oslo.log shows of it."""
    return isinstance(context, oslo_context.RequestContext) and not (
        getattr(context, "instance", None)
        or getattr(context, "instance_uuid", None)
        or context.resource_uuid
    )


_LOGGING_VALUES = oslo_context.RequestContext.get_logging_values
_TO_DICT = oslo_context.RequestContext.to_dict
# What RequestContext.get_logging_values reads each of its values from (a
# test holds this to oslo.context's), but for the masked token and its own
# identity text (oslo.log makes another).
LOGGING_ATTRIBUTES = {
    "user": "user_id",
    "project_id": "project_id",
    "system_scope": "system_scope",
    "project": "project_id",
    "domain": "domain_id",
    "user_domain": "user_domain_id",
    "project_domain": "project_domain_id",
    "is_admin": "is_admin",
    "read_only": "read_only",
    "show_deleted": "show_deleted",
    "request_id": "request_id",
    "global_request_id": "global_request_id",
    "resource_uuid": "resource_uuid",
    "roles": "roles",
    "is_admin_project": "is_admin_project",
    "user_name": "user_name",
    "project_name": "project_name",
    "domain_name": "domain_name",
    "user_domain_name": "user_domain_name",
    "project_domain_name": "project_domain_name",
}
UNREAD_LOGGING_VALUES = ("auth_token", "user_identity")
# The fields line() makes itself (the record's, the formatter's), in the
# order of its tuple, and the formatter's constant ones.
_MADE = (
    "name",
    "levelname",
    "levelno",
    "process",
    "created",
    "msecs",
    "asctime",
    "message",
    "version",
    "user_identity",
    "error_summary",
    "instance",
    "color",
    "resource",
)
# Those of them that change from line to line, in the order of the tuple a
# baked plan (``_baked``) picks from, the context's values after them.
_VARIES = ("created", "msecs", "asctime", "message", "user_identity")
# A field and its conversion (%(name)-8s), a literal %, or a positional %.
_FIELD = re.compile(r"%%|%\((\w+)\)([#0 +-]*\d*(?:\.\d*)?[diouxXeEfFgGcrsa])|%")


class _Plan(typing.NamedTuple):
    """How line() fills a format: ``text``, the format with its fields'
    names left out, takes ``pick`` of line()'s own fields followed by
    ``read`` of the context. ``fields``: each field's index among those
    and its conversion, after the text before it; ``tail`` the text
    after the last."""

    text: str
    read: Callable[[Any], tuple]
    pick: Callable[[tuple], tuple]
    error_summary: str
    fields: tuple[tuple[str, int, str], ...]
    tail: str


def _plan(fmt: str, identity: bool = False) -> _Plan | None:
    """The plan of ``fmt``, or None when it names a field line() does not
    make (or has a positional conversion); the user identity's format
    names the context's alone."""
    attributes: list[str] = []
    fields: list[tuple[str, int, str]] = []
    start = 0
    for match in _FIELD.finditer(fmt):
        name = match.group(1)
        if match.group() == "%%":
            continue
        if name in LOGGING_ATTRIBUTES:
            # The context's value wins over the formatter's (project).
            index = len(_MADE) + len(attributes)
            attributes.append(LOGGING_ATTRIBUTES[name])
        elif name is None or identity:
            return None
        elif name in _MADE:
            index = _MADE.index(name)
        else:
            return None
        fields.append((fmt[start : match.start()], index, match.group(2)))
        start = match.end()
    return _Plan(
        "".join(before + "%" + conversion for before, _, conversion in fields)
        + fmt[start:],
        _reader(attributes),
        _picker([index for _, index, _ in fields]),
        "-" if "%(error_summary)s" in fmt else "",
        tuple(fields),
        fmt[start:],
    )


def _baked(plan: _Plan, made: tuple) -> _Plan:
    """``plan`` with the fields of ``made`` (line()'s, a None for each
    that varies) written into its text: it takes ``pick`` of the
    ``_VARIES`` fields followed by the context's values."""
    text = []
    picked = []
    for before, index, conversion in plan.fields:
        text.append(before)
        if index >= len(_MADE):
            picked.append(len(_VARIES) + index - len(_MADE))
            text.append("%" + conversion)
        elif _MADE[index] in _VARIES:
            picked.append(_VARIES.index(_MADE[index]))
            text.append("%" + conversion)
        else:
            text.append((("%" + conversion) % made[index]).replace("%", "%%"))
    return plan._replace(text="".join(text) + plan.tail, pick=_picker(picked))


def _reader(attributes: list[str]) -> Callable[[Any], tuple]:
    """A function of a context: the tuple of its ``attributes``."""
    if not attributes:
        return lambda context: ()
    if len(attributes) == 1:
        get = operator.attrgetter(attributes[0])
        return lambda context: (get(context),)
    return operator.attrgetter(*attributes)


def _picker(indexes: list[int]) -> Callable[[tuple], tuple]:
    """A function of a tuple: the tuple of its items at ``indexes``."""
    if not indexes:
        return lambda values: ()
    if len(indexes) == 1:
        index = indexes[0]
        return lambda values: (values[index],)
    return operator.itemgetter(*indexes)


# Handlers whose emit is: format, write with the terminator, flush (the
# watched file reopened first if it was moved).
_PLAIN_HANDLERS = (
    logging.StreamHandler,
    logging.FileHandler,
    logging.handlers.WatchedFileHandler,
)


def log(logger: logging.Logger, level: int, msg: str, args: tuple) -> None:
    """``logger.log(level, msg, *args)`` for an enabled level, written
    straight to the handlers when each of them allows it (``_lines``),
    else through a record as logging does."""
    written = _lines(logger, level, msg % args)
    if written is None:
        # The record made here rather than by logger.log: the same record
        # without logging's walk up the stack to find where it comes from.
        frame = sys._getframe(1)
        logger.handle(
            logger.makeRecord(
                logger.name,
                level,
                frame.f_code.co_filename,
                frame.f_lineno,
                msg,
                args,
                None,
                frame.f_code.co_name,
            )
        )
        return
    for handler, line in written:
        handler.acquire()
        try:
            if type(handler) is logging.handlers.WatchedFileHandler:
                handler.reopenIfNeeded()
            stream = handler.stream
            stream.write(line + handler.terminator)
            # StreamHandler.flush, without taking the lock held here again.
            if hasattr(stream, "flush"):
                stream.flush()
        except RecursionError:
            raise
        except Exception:
            handler.handleError(
                logging.LogRecord(logger.name, level, "", 0, msg, args, None)
            )
        finally:
            handler.release()


def _lines(logger, level, message):
    """[(handler, its line)] for the handlers a record of ``logger`` at
    ``level`` goes to, when each is a plain stream or file handler (no
    filter but ``OneLine``, with nothing to fold) with our formatter, and
    the logger has no filter; else None."""
    if logger.disabled or logger.filters or "\n" in message:
        return None
    created = time.time()
    context = oslo_context.get_current()
    written = []
    formatter = line = None  # the last handler's, for the next's
    node: logging.Logger | None = logger
    while node is not None:
        for handler in node.handlers:
            if level < handler.level:
                continue
            if (
                type(handler) not in _PLAIN_HANDLERS
                or getattr(handler, "stream", None) is None
            ):
                return None
            for kept in handler.filters:
                if type(kept) is not OneLine:
                    return None
            if handler.formatter is not formatter:
                formatter = handler.formatter
                if type(formatter) is not ContextFormatter:
                    return None
                line = formatter.line(logger.name, level, message, created, context)
            if line is None:
                return None
            written.append((handler, line))
        node = node.parent if node.propagate else None
    # No handler at all: logging's last resort decides.
    return written or None
