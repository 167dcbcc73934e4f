"""Fixtures a gabbi YAML file can name in its ``fixtures:`` list.

The database and app are set up by the plugin for every file; these add
configuration for files that need it.
"""
from gabbi import fixture

from tests import fixtures


class _ConfigFixture(fixture.GabbiFixture):
    overrides = {}

    def start_fixture(self):
        self.conf = fixtures.configure(**self.overrides)

    def stop_fixture(self):
        for key in self.overrides:
            group, _, name = key.rpartition(".")
            self.conf.clear_override(name, group=group or None)
