"""``placement-status upgrade check`` (oslo.upgradecheck). Exit 0 all
passed, 1 a warning, 2 a failure, 255 an error (one line on stderr when the
configuration or the database is the problem)."""

import sys

import sqlalchemy as sa
from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

from placement import conf as placement_conf
from placement import startup
from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from placement.db import triggers
from placement.db import writable
from placement.objects import online_migrations
from placement.objects import standard_names

RUN_MIGRATIONS = "Run the placement-manage db online_data_migrations command."


class Checks(upgradecheck.UpgradeCommands):
    """The checks an operator runs before upgrading placement."""

    def __init__(self, conf):
        self.conf = conf
        self._db = None
        self._upgrade_checks = (
            ("Database Accepts Writes", Checks._check_writable),
            ("Missing Root Provider IDs", Checks._check_root_provider_ids),
            ("Incomplete Consumers", Checks._check_incomplete_consumers),
            ("Table Character Set utf8mb4", Checks._check_utf8mb4),
            ("Standard Resource Class IDs", Checks._check_standard_class_ids),
            ("Padded Names and IDs", Checks._check_padded),
            ("Change Log Triggers", Checks._check_triggers),
            (
                "Policy File JSON to YAML Migration",
                (common_checks.check_policy_json, {"conf": conf}),
            ),
        )

    def connect(self):
        """The database the checks read; a StartupError when it cannot be
        reached or holds no placement schema at all (an older one is what
        the checks are for)."""
        self._db = startup.make_database(self.conf, existing=True)
        if schema.current_revision(self._db.engine) is None:
            raise placement_conf.StartupError(
                "the database has no placement schema: run `placement-manage "
                "db sync` first"
            )

    def _database(self):
        return self._db

    def _check_writable(self):
        refused = writable.refusal(self._database().engine)
        if refused is not None:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                "The database refuses writes (it is read-only: %s). Placement "
                "answers every write 503 and no schema can be upgraded until "
                "it takes writes again: point [placement_database] connection "
                "at the primary, or make this server writable (SET GLOBAL "
                "read_only = 0 on MySQL, default_transaction_read_only = off "
                'on PostgreSQL, a writable SQLite file). See "Database '
                'faults" in doc/operations.md.' % refused,
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_root_provider_ids(self):
        if online_migrations.count_missing_root_ids(self._database()):
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                "There is at least one resource provider table record which "
                "misses its root provider id. " + RUN_MIGRATIONS,
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_incomplete_consumers(self):
        count = online_migrations.count_incomplete_consumers(self._database())
        if count:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                "There are %s incomplete consumers table records for "
                "existing allocations. %s" % (count, RUN_MIGRATIONS),
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_utf8mb4(self):
        legacy = db_api.tables_not_utf8mb4(self._database().engine)
        if legacy:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                "Tables not in the utf8mb4 character set cannot store "
                "4-byte characters (such as emoji) in names: %s. Convert "
                "them, e.g. ALTER TABLE <name> CONVERT TO CHARACTER SET "
                "utf8mb4 COLLATE utf8mb4_bin." % ", ".join(legacy),
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_standard_class_ids(self):
        wrong = standard_names.wrong_class_ids(self._database())
        if wrong:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                "Standard resource classes do not have the ids the reference "
                "service gives them (an earlier start on MySQL without "
                'NO_AUTO_VALUE_ON_ZERO): %s. See "Standard resource class '
                'ids" in doc/operations.md for the repair.' % "; ".join(wrong),
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_padded(self):
        found = padded_rows(self._database())
        if found:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                "Rows the API cannot match exactly (a project or user id "
                "ending with a space: on MySQL a claim for the id without "
                "it attaches to that row; provider names that differ only "
                "by trailing spaces: one name to MySQL's collation): %s. "
                'Rename them; see "Padded names and ids" in '
                "doc/operations.md." % "; ".join(found),
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_triggers(self):
        with self._database().engine.connect() as conn:
            missing = triggers.NAMES - triggers.present(conn)
        if missing:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                "%d of the %d change-log triggers are missing (%s): placement "
                "finds other writers' changes (the reference service, SQL "
                "by hand, a restore) only by comparing its catalog with the "
                "database twice a second (the fallback), and reads usage "
                "from the database per request. Grant the database user "
                "the TRIGGER privilege (MySQL with binary logging: also "
                "SUPER, or set log_bin_trust_function_creators = 1; "
                "PostgreSQL: own the tables) and run `placement-manage db "
                'sync` again. See "Change log modes" in doc/operations.md.'
                % (len(missing), len(triggers.NAMES), ", ".join(sorted(missing)[:3])),
            )
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)


# How many rows of each kind the check names (it says how many more).
PADDED_SHOWN = 20


def padded_rows(db: db_api.Database) -> list[str]:
    """Descriptions of the rows doc/api.md "Names and ids" has no room
    for: projects and users whose external_id ends with a space, and
    providers whose names differ only by trailing spaces (written by the
    reference service or by SQL; this service refuses both)."""
    found = []
    with db.reader() as conn:
        for table in (tables.projects, tables.users):
            # LIKE compares trailing spaces on every backend (no PAD SPACE).
            where = table.c.external_id.like("% ")
            rows = conn.execute(
                sa.select(table.c.id, table.c.external_id)
                .where(where)
                .order_by(table.c.id)
                .limit(PADDED_SHOWN)
            ).all()
            found += [
                "%s.id=%d external_id=%r" % (table.name, row.id, row.external_id)
                for row in rows
            ]
            if len(rows) == PADDED_SHOWN:
                total = conn.scalar(
                    sa.select(sa.func.count()).select_from(table).where(where)
                )
                found.append("%d %s in all" % (total, table.name))
        rp = tables.resource_providers
        base = sa.func.rtrim(rp.c.name)
        twins = (
            sa.select(base.label("base"))
            .where(rp.c.name.is_not(None))
            .group_by(base)
            .having(sa.func.count() > 1)
            .limit(PADDED_SHOWN)
            .subquery()
        )
        rows = conn.execute(
            sa.select(rp.c.id, rp.c.name)
            .where(sa.func.rtrim(rp.c.name).in_(sa.select(twins.c.base)))
            .order_by(rp.c.name, rp.c.id)
        ).all()
        found += [
            "resource_providers.id=%d name=%r" % (row.id, row.name) for row in rows
        ]
    return found


def main(argv=None):
    conf = placement_conf.command_conf()
    argv = sys.argv[1:] if argv is None else argv
    checks = Checks(conf)
    upgradecheck.register_cli_options(conf, checks)
    conf.set_default("use_stderr", True)
    try:
        placement_conf.parse_args(
            conf,
            argv,
            description="placement-status upgrade check [--json]: the checks "
            "to run before upgrading placement (exit 0 all passed, 1 a "
            "warning, 2 a failure, 255 an error). "
            + placement_conf.DEFAULT_CONFIG_HELP,
        )
        startup.setup_logging(conf)
        checks.connect()
    except placement_conf.StartupError as e:
        startup.fail("placement-status", e, argv)
        return 255
    # oslo.upgradecheck reads --json through its module's CONF, which only
    # its own main() sets.
    upgradecheck.CONF = conf
    return upgradecheck.run(conf)
