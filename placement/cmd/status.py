"""``placement-status upgrade check`` (oslo.upgradecheck). Exit 0 all
passed, 1 a warning, 2 a failure, 255 an error (one line on stderr when the
configuration or the database is the problem)."""

import sys

from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

from placement import conf as placement_conf
from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.objects import online_migrations
from placement.objects import standard_names

RUN_MIGRATIONS = "Run the placement-manage db online_data_migrations command."


class Checks(upgradecheck.UpgradeCommands):
    """The checks an operator runs before upgrading placement."""

    def __init__(self, conf):
        self.conf = conf
        self._db = None
        self._upgrade_checks = (
            ("Missing Root Provider IDs", Checks._check_root_provider_ids),
            ("Incomplete Consumers", Checks._check_incomplete_consumers),
            ("Table Character Set utf8mb4", Checks._check_utf8mb4),
            ("Standard Resource Class IDs", Checks._check_standard_class_ids),
            (
                "Policy File JSON to YAML Migration",
                (common_checks.check_policy_json, {"conf": conf}),
            ),
        )

    def connect(self):
        """The database the checks read; a StartupError when it cannot be
        reached or holds no placement schema at all (an older one is what
        the checks are for)."""
        self._db = deploy.make_database(self.conf, existing=True)
        if schema.current_revision(self._db.engine) is None:
            raise placement_conf.StartupError(
                "the database has no placement schema: run `placement-manage "
                "db sync` first"
            )

    def _database(self):
        return self._db

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
        deploy.setup_logging(conf)
        checks.connect()
    except placement_conf.StartupError as e:
        deploy.fail("placement-status", e, argv)
        return 255
    # oslo.upgradecheck reads --json through its module's CONF, which only
    # its own main() sets.
    upgradecheck.CONF = conf
    return upgradecheck.run(conf)
