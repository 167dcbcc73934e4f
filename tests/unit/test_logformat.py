"""placement's ContextFormatter writes, line for line, what oslo.log's
writes: with and without a request context, at each level, with an
exception, and with a format that shows the ISO time."""

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
