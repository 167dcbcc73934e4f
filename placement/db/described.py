"""PyMySQL connections that parse each distinct column description once.

Every result set starts with one packet per column describing it (its
name, table, type, charset, flags). PyMySQL parses them afresh for each
result: about 40 columns per claim (the candidate GET's catch-up reads
and the write's read), a tenth of a claim's CPU in process. The server
sends the same bytes for the same statement's columns each time, so the
parsed description is kept by those bytes and handed out again: the same
attributes as a fresh parse, and nothing reads or changes a description
once parsed.
"""

from typing import Any

import sqlalchemy as sa
from pymysql import connections
from pymysql import protocol
from sqlalchemy import event

# Distinct descriptions kept (each a few hundred bytes); past it the kept
# ones are dropped and parsed again as met (a bound, not a working size:
# a process's statements have a few hundred columns in all).
KEPT = 4096


class _Field(protocol.FieldDescriptorPacket):
    """A parsed column description whose PEP 249 tuple is made once."""

    def __init__(self, data: bytes, encoding: str) -> None:
        super().__init__(data, encoding)
        self._description = super().description()

    def description(self) -> tuple[Any, ...]:
        return self._description


_PARSED: dict[tuple[bytes, str], _Field] = {}


def _field(data: bytes, encoding: str) -> _Field:
    key = data, encoding
    field = _PARSED.get(key)
    if field is None:
        if len(_PARSED) >= KEPT:
            _PARSED.clear()
        field = _PARSED[key] = _Field(data, encoding)
    return field


class Connection(connections.Connection):
    """A PyMySQL connection reading column descriptions through ``_field``."""

    def _read_packet(self, packet_type: Any = protocol.MysqlPacket) -> Any:
        if packet_type is protocol.FieldDescriptorPacket:
            packet_type = _field
        return super()._read_packet(packet_type)


def parse_once(engine: sa.Engine) -> None:
    """Open ``engine``'s connections (PyMySQL) as ``Connection``."""

    @event.listens_for(engine, "do_connect")
    def _connect(dialect, record, cargs, cparams):
        return Connection(*cargs, **cparams)
