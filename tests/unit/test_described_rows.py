"""PyMySQL rows parsed in one loop (db/described.py ``_Result``): the same
values, and the same position left in the packet, as PyMySQL's own
reader, for every length encoding, NULLs, decoders and short rows."""

import random

from pymysql import connections
from pymysql import protocol

from placement.db import described

CONVERTERS = [(None, None), ("ascii", int), ("utf8", None), ("ascii", None)]


def _coded(value):
    """``value`` (bytes or None) as a MySQL length-coded string."""
    if value is None:
        return b"\xfb"
    size = len(value)
    if size < 251:
        return bytes([size]) + value
    if size < 2**16:
        return b"\xfc" + size.to_bytes(2, "little") + value
    if size < 2**24:
        return b"\xfd" + size.to_bytes(3, "little") + value
    return b"\xfe" + size.to_bytes(8, "little") + value


def _values(pick, converters):
    for _, converter in converters:
        if pick.random() < 0.2:
            yield None
        elif converter is int:
            yield str(pick.randint(-(10**12), 10**12)).encode()
        else:
            size = pick.choice([0, 1, 5, 250, 251, 300, 70000])
            yield bytes(pick.randint(48, 122) for _ in range(size))


def test_rows_are_pymysqls():
    pick = random.Random(45)
    for _ in range(2000):
        converters = [pick.choice(CONVERTERS) for _ in range(pick.randint(0, 6))]
        values = list(_values(pick, converters))
        # A row may end early (PyMySQL stops at the packet's end).
        given = pick.randint(0, len(values)) if pick.random() < 0.1 else len(values)
        data = b"".join(_coded(v) for v in values[:given])
        theirs = connections.MySQLResult(None)
        ours = described._Result(None)
        theirs.converters = ours.converters = converters
        their_packet = protocol.MysqlPacket(data, "utf8")
        our_packet = protocol.MysqlPacket(data, "utf8")
        expected = theirs._read_row_from_packet(their_packet)
        assert ours._read_row_from_packet(our_packet) == expected
        assert our_packet._position == their_packet._position
