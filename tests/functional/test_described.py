"""``placement.db.described``: PyMySQL connections parsing each distinct
column description once describe every result as a fresh parse does,
also when the same statement's columns change (a table altered)."""

import pymysql
import pytest
import sqlalchemy as sa

from placement.db import described
from placement.db import engine as db_engine


def _descriptions(conn, statement):
    cursor = conn.cursor()
    cursor.execute(statement)
    cursor.fetchall()
    return cursor.description


def test_descriptions_as_parsed_afresh(db):
    if db.dialect != "mysql":
        pytest.skip("PyMySQL only")
    url = db.engine.url
    plain = pymysql.connect(
        host=url.host,
        port=url.port or 3306,
        user=url.username,
        password=url.password or "",
        database=url.database,
        charset="utf8mb4",
        autocommit=True,
    )
    statement = "SELECT id, v, id + 1 AS n FROM described_t"
    try:
        for engine in (db.engine, db_engine.autocommit(db.engine)):
            with engine.connect() as conn:
                assert isinstance(
                    conn.connection.dbapi_connection, described.Connection
                )
        with db.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE described_t (id INT, v VARCHAR(8))")
            conn.exec_driver_sql("INSERT INTO described_t VALUES (1, 'a')")
        for alter in ("", "ALTER TABLE described_t MODIFY v VARBINARY(20)"):
            if alter:
                with db.engine.begin() as conn:
                    conn.exec_driver_sql(alter)
            expected = _descriptions(plain, statement)
            with db.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                for _ in range(2):
                    assert _descriptions(raw, statement) == expected
                rows = conn.execute(sa.text(statement)).all()
            assert [tuple(r) for r in rows] == [(1, b"a" if alter else "a", 2)]
    finally:
        plain.close()
