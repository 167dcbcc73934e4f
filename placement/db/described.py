"""PyMySQL connections that parse each distinct column description once,
and rows in one loop each; a multi-statement query's answers read
without a result object each (``read_answers``). What reads PyMySQL's
packets by hand is here, in one place.

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


class _Result(connections.MySQLResult):
    """PyMySQL's result, each row's values parsed in one loop: PyMySQL's
    reader makes three or four Python calls per value (a length, then the
    bytes), most of a small result's parsing."""

    def _read_row_from_packet(self, packet: Any) -> tuple[Any, ...]:
        data = packet._data
        at = packet._position
        end = len(data)
        row: list[Any] = []
        for encoding, converter in self.converters:
            if at >= end:
                break  # no more values in this row (PyMySQL's IndexError)
            first = data[at]
            at += 1
            if first < 251:
                size = first
            elif first == 252:
                size = data[at] | data[at + 1] << 8
                at += 2
            elif first == 253:
                size = data[at] | data[at + 1] << 8 | data[at + 2] << 16
                at += 3
            elif first == 254:
                size = int.from_bytes(data[at : at + 8], "little")
                at += 8
            else:  # 251: NULL (255 also reads as None in PyMySQL)
                row.append(None)
                continue
            value = data[at : at + size]
            if len(value) != size:
                raise AssertionError(
                    "Result length not requested length: %d of %d" % (len(value), size)
                )
            at += size
            if encoding is not None:
                value = value.decode(encoding)
            if converter is not None:
                value = converter(value)
            row.append(value)
        packet._position = at
        return tuple(row)


class Connection(connections.Connection):
    """A PyMySQL connection reading column descriptions through ``_field``,
    and rows through ``_Result``."""

    def _read_packet(self, packet_type: Any = protocol.MysqlPacket) -> Any:
        if packet_type is protocol.FieldDescriptorPacket:
            packet_type = _field
        return super()._read_packet(packet_type)

    def _read_query_result(self, unbuffered: bool = False) -> Any:
        # PyMySQL's, with _Result for its MySQLResult.
        self._result = None
        result = _Result(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows


def read_answers(conn: Any) -> None:
    """Read the answers of a multi-statement query on the PyMySQL
    connection ``conn`` as its ``next_result`` does, one after the other
    until the last (raising the first error met), without a result object
    each: the held statements and the COMMIT each answer an OK packet,
    whose status tells whether another answer follows."""
    conn._result = None
    while True:
        packet = conn._read_packet()  # raises a statement's error
        if packet.is_ok_packet():
            packet.advance(1)
            conn._affected_rows = packet.read_length_encoded_integer()
            packet.read_length_encoded_integer()  # the insert id
            status = conn.server_status = packet.read_uint16()
            more = status & _MORE_RESULTS
        else:  # a result set: read as PyMySQL reads one
            result = _Result(conn)
            try:
                result._read_result_packet(packet)
            finally:
                result.connection = None
            conn._result, conn._affected_rows = result, result.affected_rows
            if result.server_status is not None:
                conn.server_status = result.server_status
            more = result.has_next
        if not more:
            return


_MORE_RESULTS = connections.SERVER_STATUS.SERVER_MORE_RESULTS_EXISTS


def parse_once(engine: sa.Engine) -> None:
    """Open ``engine``'s connections (PyMySQL) as ``Connection``."""

    @event.listens_for(engine, "do_connect")
    def _connect(dialect, record, cargs, cparams):
        return Connection(*cargs, **cparams)
