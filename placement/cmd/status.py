"""``placement-status upgrade check`` (oslo.upgradecheck; config-and-cli.md
§5). Exit 0 all passed, 1 a warning, 2 a failure, 255 unexpected error."""
import sys

from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

from placement import conf as placement_conf
from placement import deploy
from placement.objects import online_migrations

RUN_MIGRATIONS = ("Run the placement-manage db online_data_migrations "
                  "command.")


class Checks(upgradecheck.UpgradeCommands):
    """The checks an operator runs before upgrading placement."""

    def __init__(self, conf):
        self.conf = conf
        self._db = None

    def _database(self):
        if self._db is None:
            self._db = deploy.make_database(self.conf)
        return self._db

    def _check_root_provider_ids(self):
        if online_migrations.count_missing_root_ids(self._database()):
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                "There is at least one resource provider table record which "
                "misses its root provider id. " + RUN_MIGRATIONS)
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_incomplete_consumers(self):
        count = online_migrations.count_incomplete_consumers(self._database())
        if count:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                "There are %s incomplete consumers table records for "
                "existing allocations. %s" % (count, RUN_MIGRATIONS))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    _upgrade_checks = (
        ("Missing Root Provider IDs", _check_root_provider_ids),
        ("Incomplete Consumers", _check_incomplete_consumers),
        ("Policy File JSON to YAML Migration",
         (common_checks.check_policy_json, {"conf": placement_conf.CONF})),
    )


def main(argv=None):
    conf = placement_conf.CONF
    argv = sys.argv[1:] if argv is None else argv
    return upgradecheck.main(conf, "placement", Checks(conf), argv=argv,
                             default_config_files=None)
