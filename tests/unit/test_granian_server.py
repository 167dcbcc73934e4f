"""granian's logging set-up, as placement-api --server granian gives it,
leaves placement's logging as it was: granian's lines reach placement's
handlers, and none of those is closed (granian sets its logging up in
the master and again in every worker)."""

import logging

from granian import log as granian_log

from placement.cmd import granian_server


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []
        self.closed = False

    def emit(self, record):
        self.lines.append(record.getMessage())

    def close(self):
        self.closed = True
        super().close()


def test_granian_logs_through_placements_handlers():
    root = logging.getLogger()
    handler = Kept()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        granian_log.configure_logging(
            granian_log.LogLevels.info, granian_server.LOGGING, True
        )
        logging.getLogger("_granian").info("Spawning worker-1")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert not handler.closed
    assert handler.lines == ["Spawning worker-1"]
    assert logging.getLogger("_granian").handlers == []
