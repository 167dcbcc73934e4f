"""placement-manage and placement-status, run as real commands against a
fresh SQLite or MySQL database (README.rst, "Commands")."""

import json
import sys

import pytest
import sqlalchemy as sa

from placement.db import schema
from placement.db import tables
from tests import fixtures
from tests import helpers

# Upstream's chain ends at a082b8bb98d0; ours adds catalog_changes.
HEAD = "b8e3f1a6c9d4"
INCOMPLETE = "00000000-0000-0000-0000-000000000000"


def run(args, url=None, env=None, python=None):
    """A console script (``args[0]``), or ``python`` code given ``args``."""
    environ = {"OS_PLACEMENT_DATABASE__CONNECTION": url} if url else {}
    environ.update(env or {})
    cmd = (
        [sys.executable, "-c", python] if python else [helpers.script(args[0])]
    ) + list(args[1:])
    return helpers.run(cmd, environ)


@pytest.fixture(params=fixtures.BACKENDS)
def url(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url:
        yield url


@pytest.fixture
def engine(url):
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def _seed(engine, roots_missing=3, consumerless=("c1", "c2")):
    """Rows as an old release left them: providers without a root id and
    allocations of consumers that have no consumer record."""
    schema.upgrade(engine)
    with engine.begin() as conn:
        if roots_missing:
            conn.execute(
                tables.resource_providers.insert(),
                [
                    {
                        "id": i + 1,
                        "uuid": "00000000-0000-0000-0000-00000000000%d" % i,
                        "name": "rp%d" % i,
                        "generation": 0,
                    }
                    for i in range(roots_missing)
                ],
            )
        conn.execute(
            tables.allocations.insert(),
            [
                {
                    "resource_provider_id": 1,
                    "resource_class_id": rc,
                    "used": 1,
                    "consumer_id": consumer,
                }
                for consumer in consumerless
                for rc in (0, 1)
            ],
        )


def _table_row(output, name):
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == name:
            return [int(c) for c in cells[1:]]
    raise AssertionError("no row %s in\n%s" % (name, output))


# -- placement-manage --------------------------------------------------------


def test_manage_without_category_prints_help():
    result = run(["placement-manage"])
    assert result.returncode == 1
    assert "usage: placement-manage" in result.stdout
    assert "{db,capacity" in result.stdout


def test_manage_db_alone_prints_db_help():
    result = run(["placement-manage", "db"])
    assert result.returncode == 1
    assert "{sync,downgrade,version,stamp,online_data_migrations}" in result.stdout


def test_manage_refuses_without_connection():
    result = run(["placement-manage", "db", "version"])
    assert result.returncode == 1
    assert "[placement_database] connection is not set" in result.stderr


def test_db_sync_version_stamp(url):
    assert run(["placement-manage", "db", "version"], url).stdout == (
        "no schema (run placement-manage db sync)\n"
    )
    result = run(["placement-manage", "db", "sync"], url)
    assert result.returncode == 0, result.stderr
    assert run(["placement-manage", "db", "version"], url).stdout == HEAD + "\n"
    assert run(["placement-manage", "db", "sync"], url).returncode == 0
    result = run(["placement-manage", "db", "stamp", "b4ed3a175331"], url)
    assert result.returncode == 0
    assert run(["placement-manage", "db", "version"], url).stdout == "b4ed3a175331\n"


def test_config_file_and_dir(url, tmp_path):
    conf = tmp_path / "placement.conf"
    conf.write_text("[placement_database]\nconnection = %s\n" % url)
    result = run(["placement-manage", "--config-file", str(conf), "db", "sync"])
    assert result.returncode == 0, result.stderr
    confdir = tmp_path / "conf.d"
    confdir.mkdir()
    (confdir / "db.conf").write_text(conf.read_text())
    result = run(["placement-manage", "--config-dir", str(confdir), "db", "version"])
    assert result.stdout == HEAD + "\n"


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_online_migrations_bad_max_count(url, value):
    result = run(
        ["placement-manage", "db", "online_data_migrations", "--max-count", value], url
    )
    assert result.returncode == 127
    assert "Must supply a positive value for max_count" in result.stderr


def test_online_migrations_in_batches(url, engine):
    _seed(engine)
    cmd = ["placement-manage", "db", "online_data_migrations"]
    result = run(cmd + ["--max-count", "2"], url)
    assert result.returncode == 1, result.stderr
    assert "Total Found" in result.stdout
    assert _table_row(result.stdout, "set_root_provider_ids") == [3, 2]
    assert _table_row(result.stdout, "create_incomplete_consumers") == [0, 0]

    result = run(cmd, url)
    assert result.returncode == 0, result.stderr
    assert _table_row(result.stdout, "set_root_provider_ids") == [1, 1]
    assert _table_row(result.stdout, "create_incomplete_consumers") == [2, 2]

    result = run(cmd + ["--max-count", "5"], url)
    assert result.returncode == 0
    assert _table_row(result.stdout, "create_incomplete_consumers") == [0, 0]

    with engine.connect() as conn:
        rp = tables.resource_providers
        assert (
            conn.scalar(
                sa.select(sa.func.count()).where(rp.c.root_provider_id != rp.c.id)
            )
            == 0
        )
        rows = conn.execute(
            sa.select(
                tables.consumers.c.uuid,
                tables.projects.c.external_id,
                tables.users.c.external_id.label("user"),
            )
            .join(
                tables.projects, tables.projects.c.id == tables.consumers.c.project_id
            )
            .join(tables.users, tables.users.c.id == tables.consumers.c.user_id)
        ).all()
    assert sorted(rows) == [
        ("c1", INCOMPLETE, INCOMPLETE),
        ("c2", INCOMPLETE, INCOMPLETE),
    ]


FAILING = """
import sys
from placement.objects import online_migrations
def boom(db, count):
    raise RuntimeError("boom")
online_migrations.MIGRATIONS = {"boom": boom}
from placement.cmd import manage
sys.exit(manage.main(sys.argv[1:]))
"""


def test_online_migration_that_raises_exits_2(url):
    run(["placement-manage", "db", "sync"], url)
    result = run(["x", "db", "online_data_migrations"], url, python=FAILING)
    assert result.returncode == 2
    assert "Error attempting to run boom" in result.stderr


# The command (``placement.cmd.<module>``) run as its console script runs
# it, then the app's modules it loaded.
LOADED = """
import sys
from placement.cmd import %s as command
status = command.main(sys.argv[1:])
loaded = {"numpy", "placement.api.app", "placement.deploy", "placement.handlers"}
print(sorted(loaded & set(sys.modules)))
sys.exit(status)
"""


@pytest.mark.parametrize(
    "module,args",
    [
        ("manage", ["db", "sync"]),
        ("manage", ["db", "version"]),
        ("status", ["upgrade", "check"]),
    ],
)
def test_commands_start_without_the_app(tmp_path, module, args):
    """placement-manage's db commands and placement-status build no app:
    they load none of its modules (numpy and the handlers: about 1 s of
    CPU a run)."""
    url = "sqlite:///%s/p.sqlite" % tmp_path
    run(["placement-manage", "db", "sync"], url)
    result = run(["x", *args], url, python=LOADED % module)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


# -- placement-status --------------------------------------------------------


def test_status_all_passed(url):
    run(["placement-manage", "db", "sync"], url)
    result = run(["placement-status", "upgrade", "check"], url)
    assert result.returncode == 0, result.stdout + result.stderr
    for check in (
        "Database Accepts Writes",
        "Missing Root Provider IDs",
        "Incomplete Consumers",
        "Policy File JSON to YAML Migration",
        "Change Log Triggers",
    ):
        assert "Check: %s" % check in result.stdout
    assert "Result: Failure" not in result.stdout


def test_status_warns_about_incomplete_consumers(url, engine):
    _seed(engine, roots_missing=0)
    with engine.begin() as conn:
        conn.execute(
            tables.resource_providers.insert().values(
                id=1,
                uuid="00000000-0000-0000-0000-000000000001",
                name="rp",
                generation=0,
                root_provider_id=1,
            )
        )
    result = run(["placement-status", "upgrade", "check"], url)
    assert result.returncode == 1, result.stdout
    assert "Result: Warning" in result.stdout
    assert "There are 2 incomplete consumers" in result.stdout


def test_status_fails_on_missing_root_ids(url, engine):
    _seed(engine)
    result = run(["placement-status", "upgrade", "check"], url)
    assert result.returncode == 2, result.stdout
    assert "Result: Failure" in result.stdout
    assert "misses its root provider id" in result.stdout


def test_status_unexpected_error(url):
    # No schema at all: the checks cannot run.
    result = run(["placement-status", "upgrade", "check"], url)
    assert result.returncode == 255


def test_status_warns_about_padded_names_and_ids(url, engine):
    """Rows the reference service or SQL may have left: a project and a
    user id ending with a space, and (where the unique key lets them in)
    provider names that differ only by trailing spaces."""
    run(["placement-manage", "db", "sync"], url)
    with engine.begin() as conn:
        conn.execute(
            tables.projects.insert(),
            [{"id": 7, "external_id": "legacy "}, {"id": 8, "external_id": "ok"}],
        )
        conn.execute(tables.users.insert(), [{"id": 9, "external_id": "ghost  "}])
        names = ["twin", "twin "] if engine.dialect.name != "mysql" else ["solo "]
        conn.execute(
            tables.resource_providers.insert(),
            [
                {
                    "id": i + 1,
                    "uuid": "00000000-0000-0000-0000-00000000000%d" % i,
                    "name": name,
                    "generation": 0,
                    "root_provider_id": i + 1,
                }
                for i, name in enumerate(names + ["alone"])
            ],
        )
    result = run(["placement-status", "upgrade", "check", "--json"], url)
    assert result.returncode == 1, result.stdout + result.stderr
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    out = checks["Padded Names and IDs"]["details"]
    assert "projects.id=7 external_id='legacy '" in out, out
    assert "users.id=9 external_id='ghost  '" in out, out
    assert "ok'" not in out and "alone" not in out, out
    if engine.dialect.name != "mysql":
        assert "resource_providers.id=1 name='twin'" in out, out
        assert "resource_providers.id=2 name='twin '" in out, out
    assert "Padded names and ids" in out, out
