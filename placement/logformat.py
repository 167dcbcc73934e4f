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
import os
import sys
import time
import types
from typing import Any

from oslo_context import context as oslo_context
from oslo_log import formatters

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
        self._second: tuple[int, str] | None = None

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
        (a context naming an instance, a level with a suffix or an error
        summary, an ISO time, fields of the record not kept here)."""
        if (
            not logging.DEBUG < levelno < logging.WARNING
            or self._isotime
            or not _plain(context)
            or self.converter is not time.localtime
        ):
            return None
        conf = self.conf
        values = context.get_logging_values()
        fmt = (
            conf.logging_context_format_string
            if values.get("request_id")
            else conf.logging_default_format_string
        )
        # Set in the order the record gets them: the record's own, the
        # formatter's, the context's, then what the formatter sets last.
        fields = {
            "name": name,
            "levelname": logging.getLevelName(levelno),
            "levelno": levelno,
            "process": os.getpid() if logging.logProcesses else None,
            "created": created,
            # As logging.LogRecord computes it.
            "msecs": int((created - int(created)) * 1000) + 0.0,
            "project": self.project,
            "version": self.version,
        }
        fields.update(values)
        fields["instance"] = ""
        for key in (
            "color",
            "resource",
            "user_name",
            "project_name",
            "global_request_id",
        ):
            fields.setdefault(key, "")
        fields["user_identity"] = conf.logging_user_identity_format % (
            formatters._ReplaceFalseValue(values)
        )
        fields["error_summary"] = "-" if "%(error_summary)s" in fmt else ""
        fields["message"] = message
        fields["asctime"] = self._asctime(created, fields["msecs"])
        try:
            return fmt % fields
        except (KeyError, TypeError, ValueError):
            return None

    def _asctime(self, created, msecs):
        """``formatTime``'s text, its seconds kept from the last line."""
        second = int(created)
        kept = self._second
        if kept is None or kept[0] != second:
            fmt = self.datefmt or self.default_time_format
            kept = self._second = (second, time.strftime(fmt, self.converter(second)))
        if self.datefmt or not self.default_msec_format:
            return kept[1]
        return self.default_msec_format % (kept[1], msecs)


def _plain(context):
    """A context whose logging values are all oslo.log shows of it."""
    return isinstance(context, oslo_context.RequestContext) and not (
        getattr(context, "instance", None)
        or getattr(context, "instance_uuid", None)
        or context.resource_uuid
    )


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
            handler.stream.write(line + handler.terminator)
            handler.flush()
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
    lines: dict[int, str | None] = {}
    node: logging.Logger | None = logger
    while node is not None:
        for handler in node.handlers:
            if level < handler.level:
                continue
            formatter = handler.formatter
            if (
                type(handler) not in _PLAIN_HANDLERS
                or type(formatter) is not ContextFormatter
                or getattr(handler, "stream", None) is None
                or any(type(f) is not OneLine for f in handler.filters)
            ):
                return None
            key = id(formatter)
            if key not in lines:
                lines[key] = formatter.line(
                    logger.name, level, message, created, context
                )
            line = lines[key]
            if line is None:
                return None
            written.append((handler, line))
        node = node.parent if node.propagate else None
    # No handler at all: logging's last resort decides.
    return written or None
