"""A placement database for another project's tests (doc/testing-with-
placement.md): a fresh SQLite file with the schema at head and the
standard traits and resource classes, gone when the test ends."""

import os

import fixtures

from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names


class Database(fixtures.Fixture):
    """A ready placement database for the configuration of
    ``conf_fixture`` (an ``oslo_config.fixture.Config`` whose ConfigOpts
    holds placement's options, ``placement.conf.register_opts``).

    ``set_config``: make a new SQLite file in a temporary directory and set
    ``[placement_database] connection`` to it (with ``sqlite_synchronous``
    off: a test's database need not survive a power cut); otherwise the
    schema is created in the database the configuration names, which must
    be empty. ``.db`` is the ``placement.db.api.Database`` an app built
    for that configuration uses (``placement.deploy.build_app(conf,
    db=fixture.db)``)."""

    def __init__(self, conf_fixture, set_config=False):
        super().__init__()
        self.conf_fixture = conf_fixture
        self.set_config = set_config
        self.db = None

    def _setUp(self):
        conf = self.conf_fixture.conf
        if self.set_config:
            directory = self.useFixture(fixtures.TempDir()).path
            self.conf_fixture.config(
                group="placement_database",
                connection="sqlite:///%s" % os.path.join(directory, "placement.db"),
                sqlite_synchronous=False,
            )
        engine = db_api.create_engine(db_api.build_url(conf), conf)
        self.addCleanup(engine.dispose)
        schema.create_at_head(engine)
        self.db = db_api.Database(engine, conf)
        standard_names.sync_standard_names(self.db)
