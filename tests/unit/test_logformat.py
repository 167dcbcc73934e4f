"""placement's ContextFormatter writes, line for line, what oslo.log's
writes: with and without a request context, at each level, with an
exception, and with a format that shows the ISO time."""

import io
import logging
import sys

import pytest
from oslo_context import context as oslo_context
from oslo_log import formatters

from placement import conf as placement_conf
from placement import logformat


def _conf(**overrides):
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    for name, value in overrides.items():
        conf.set_override(name, value)
    return conf


def _record(level, exc_info=None):
    record = logging.LogRecord(
        "placement.requestlog", level, "f.py", 7, 'x "%s"', ("y",), exc_info
    )
    record.created, record.msecs = 1_700_000_000.25, 250.0
    return record


def _lines(conf, exc_info=None):
    """(oslo.log's line, ours) for a record at each level."""
    kwargs = {"project": "placement", "version": "1", "datefmt": None, "config": conf}
    theirs = formatters.ContextFormatter(**kwargs)
    ours = logformat.ContextFormatter(**kwargs)
    return [
        (theirs.format(_record(level, exc_info)), ours.format(_record(level, exc_info)))
        for level in (logging.DEBUG, logging.INFO, logging.WARNING)
    ]


def _clear_context():
    # oslo.context keeps the thread's current context here.
    vars(oslo_context._request_store).pop("context", None)


@pytest.fixture
def no_context():
    _clear_context()
    yield
    _clear_context()


def test_same_lines_with_and_without_a_context(no_context):
    conf = _conf()
    without = _lines(conf)
    oslo_context.RequestContext(
        request_id="req-1", global_request_id="req-0", user_id="u", project_id="p"
    )
    within = _lines(conf)
    for theirs, ours in without + within:
        assert ours == theirs
    assert "[req-0 req-1 u p - - - -]" in within[1][1]


def test_same_lines_with_an_exception(no_context):
    oslo_context.RequestContext(request_id="req-1")
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    for theirs, ours in _lines(_conf(), exc_info):
        assert ours == theirs
        assert "ValueError: boom" in ours


def test_iso_time_shown_when_the_format_asks(no_context):
    conf = _conf(logging_context_format_string="%(isotime)s %(request_id)s %(message)s")
    oslo_context.RequestContext(request_id="req-1")
    for theirs, ours in _lines(conf):
        assert ours == theirs
        assert ours.startswith("2023-11-14T")


# -- a line written without a record (logformat.log) -------------------------

CREATED = 1_700_000_000.25


def _formatter(conf, datefmt="%Y-%m-%d %H:%M:%S"):
    return logformat.ContextFormatter(
        project="placement", version="1", datefmt=datefmt, config=conf
    )


CONTEXTS = [
    {"request_id": "req-1"},
    {"request_id": "req-1", "global_request_id": "req-0", "user_id": "u"},
    {
        "request_id": "req-1",
        "user_id": "u",
        "project_id": "p",
        "roles": ["admin"],
        "auth_token": "secret",
        "user_domain_id": "d",
    },
    {},  # no request id: the default format
]


@pytest.mark.parametrize("values", CONTEXTS)
@pytest.mark.parametrize("datefmt", ["%Y-%m-%d %H:%M:%S", None])
def test_line_is_what_format_writes(no_context, values, datefmt):
    formatter = _formatter(_conf(), datefmt)
    context = oslo_context.RequestContext(**values)
    record = _record(logging.INFO)
    record.created, record.msecs = CREATED, 250.0
    expected = formatter.format(record)
    assert (
        formatter.line("placement.requestlog", logging.INFO, 'x "y"', CREATED, context)
        == expected
    )


def test_line_is_what_format_writes_as_callers_change(no_context):
    """One formatter, the callers in turn and again (their identity texts
    kept), and a value that cannot be kept (a list)."""
    formatter = _formatter(_conf(), None)
    for values in CONTEXTS * 2 + [{"request_id": "req-1", "user_id": ["u", "v"]}]:
        context = oslo_context.RequestContext(**values)
        record = _record(logging.INFO)
        record.created, record.msecs = CREATED, 250.0
        expected = formatter.format(record)
        line = formatter.line(
            "placement.requestlog", logging.INFO, 'x "y"', CREATED, context
        )
        assert line == expected


EVERY_FIELD = (
    " ".join(
        "%%(%s)s" % name
        for name in sorted(logformat.LOGGING_ATTRIBUTES)
        + ["name", "levelname", "levelno", "process", "created", "version"]
        + ["instance", "color", "resource", "user_identity", "error_summary"]
    )
    + " %(asctime)s.%(msecs)03d 100%% %(message)s"
)


def test_line_is_what_format_writes_of_every_field(no_context):
    conf = _conf(
        logging_context_format_string=EVERY_FIELD,
        logging_user_identity_format="%(user)s/%(project)s 100%%",
    )
    context = oslo_context.RequestContext(
        **{
            name: "v-" + name
            for name in (
                "request_id",
                "global_request_id",
                "user_id",
                "project_id",
                "domain_id",
                "user_domain_id",
                "project_domain_id",
                "user_name",
                "project_name",
                "domain_name",
                "user_domain_name",
                "project_domain_name",
                "system_scope",
            )
        },
        roles=["r"],
        is_admin=True,
    )
    record = _record(logging.INFO)
    formatter = _formatter(conf)
    line = formatter.line(
        "placement.requestlog", logging.INFO, 'x "y"', CREATED, context
    )
    assert line == formatter.format(record)
    assert "v-user_id/v-project_id 100%" in line


def test_line_writes_conversions_and_each_process_its_id(no_context, monkeypatch):
    """The fields written into a format once per logger, level and process
    keep their conversions (widths, alignment, repr) and a literal %; a
    forked worker's lines carry its own process id."""
    conf = _conf(
        logging_context_format_string="%(process)7d|%(levelname)-8s|%(levelno)03d|"
        "%(name).9s|%(version)r|%(msecs)05.1f|%(request_id)12s 5%% %(message)s"
    )
    context = oslo_context.RequestContext(request_id="req-1")
    formatter = _formatter(conf)
    for pid in (4242, 4243):
        monkeypatch.setattr(logformat.procid, "current", lambda pid=pid: pid)
        record = _record(logging.INFO)
        record.process = pid
        line = formatter.line(
            "placement.requestlog", logging.INFO, 'x "y"', CREATED, context
        )
        assert line == formatter.format(record)
        assert line.startswith("%7d|INFO    |020|placement|'1'|250.0|" % pid)


def test_logging_attributes_are_oslo_contexts():
    """Each logging value line() reads from an attribute is that
    attribute's, and it reads all of them but the token and identity."""
    context = oslo_context.RequestContext(request_id="r")
    for attribute in set(logformat.LOGGING_ATTRIBUTES.values()):
        setattr(context, attribute, "v-" + attribute)
    values = context.get_logging_values()
    assert set(values) == set(logformat.LOGGING_ATTRIBUTES) | set(
        logformat.UNREAD_LOGGING_VALUES
    )
    for name, attribute in logformat.LOGGING_ATTRIBUTES.items():
        assert values[name] == "v-" + attribute


class _OwnValues(oslo_context.RequestContext):
    def get_logging_values(self):
        return dict(super().get_logging_values(), user="someone else")


@pytest.mark.parametrize(
    "conf, level, context",
    [
        # A field of the record the line is not made with.
        (
            {"logging_context_format_string": "%(lineno)d %(message)s"},
            logging.INFO,
            {"request_id": "req-1"},
        ),
        # An ISO time.
        (
            {"logging_context_format_string": "%(isotime)s %(message)s"},
            logging.INFO,
            {"request_id": "req-1"},
        ),
        # The debug suffix; a warning's error summary.
        ({}, logging.DEBUG, {"request_id": "req-1"}),
        ({}, logging.WARNING, {"request_id": "req-1"}),
        # A context naming a resource.
        ({}, logging.INFO, {"request_id": "req-1", "resource_uuid": "r"}),
        # The masked token; a positional conversion.
        (
            {"logging_context_format_string": "%(auth_token)s %(message)s"},
            logging.INFO,
            {"request_id": "req-1"},
        ),
        (
            {"logging_user_identity_format": "%(auth_token)s"},
            logging.INFO,
            {"request_id": "req-1"},
        ),
        (
            {"logging_user_identity_format": "%(user)s %s"},
            logging.INFO,
            {"request_id": "req-1"},
        ),
        # A context with logging values of its own.
        ({}, logging.INFO, _OwnValues(request_id="req-1")),
    ],
)
def test_line_left_to_the_record(no_context, conf, level, context):
    formatter = _formatter(_conf(**conf))
    if isinstance(context, dict):
        context = oslo_context.RequestContext(**context)
    line = formatter.line("placement.requestlog", level, "m", CREATED, context)
    assert line is None


class _Seen(logging.Handler):
    """A handler of another kind: it is given the record."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def logger(no_context, monkeypatch):
    """A logger of its own writing to a StringIO through our formatter, at a
    fixed time; [stream handler]."""
    monkeypatch.setattr(logformat.time, "time", lambda: CREATED)
    logger = logging.getLogger("placement.tests.logformat")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(_formatter(_conf()))
    handler.addFilter(logformat.OneLine())
    logger.addHandler(handler)
    oslo_context.RequestContext(request_id="req-1", user_id="u")
    yield logger
    for added in list(logger.handlers):
        logger.removeHandler(added)
    logger.filters.clear()


def _by_record(logger, msg, args):
    """What logging writes of ``msg % args`` to ``logger``'s first handler."""
    record = logger.makeRecord(logger.name, logging.INFO, "f.py", 1, msg, args, None)
    record.created, record.msecs = CREATED, 250.0
    logger.handlers[0].filter(record)
    return logger.handlers[0].format(record) + "\n"


def test_log_writes_the_records_line(logger):
    logformat.log(logger, logging.INFO, 'x "%s" %.6f', ("y", 0.5))
    assert logger.handlers[0].stream.getvalue() == _by_record(
        logger, 'x "%s" %.6f', ("y", 0.5)
    )


def test_log_other_handlers_get_the_record(logger):
    seen = _Seen()
    logger.addHandler(seen)
    logformat.log(logger, logging.INFO, 'x "%s"', ("y",))
    assert [r.getMessage() for r in seen.records] == ['x "y"']
    assert logger.handlers[0].stream.getvalue() == _by_record(logger, 'x "%s"', ("y",))


def test_log_logger_filters_see_the_record(logger):
    logger.addFilter(lambda record: record.getMessage() != "hidden")
    logformat.log(logger, logging.INFO, "%s", ("hidden",))
    logformat.log(logger, logging.INFO, "%s", ("shown",))
    assert logger.handlers[0].stream.getvalue() == _by_record(logger, "%s", ("shown",))


def test_log_folds_a_multi_line_message(logger):
    logformat.log(logger, logging.INFO, "%s", ("a\n b",))
    written = logger.handlers[0].stream.getvalue()
    assert written.endswith("] a b\n")
    assert written == _by_record(logger, "%s", ("a\n b",))
