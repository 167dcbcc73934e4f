"""pytest plugin: every ``gabbits/*.yaml`` file runs once per database
backend (SQLite twice: with the provider catalog on and off), each run on
its own fresh database, every gabbi test a pytest item.

A YAML file's tests run in order against one in-process app (httpx WSGI
transport). A request whose path starts with ``/placement`` is served as if
the app were mounted there (SCRIPT_NAME), to test prefix mounts.
"""

import contextlib
import os
import unittest

import pytest
from gabbi import handlers as gabbi_handlers
from gabbi import suitemaker
from gabbi import utils as gabbi_utils

from tests import fixtures
from tests.functional import gabbi_fixtures

MOUNT_PREFIX = "/placement"


class CurrentApp:
    """The WSGI app gabbi talks to: whichever file's app is running now."""

    app = None

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == MOUNT_PREFIX or path.startswith(MOUNT_PREFIX + "/"):
            environ["SCRIPT_NAME"] = MOUNT_PREFIX
            environ["PATH_INFO"] = path[len(MOUNT_PREFIX) :]
        return self.app(environ, start_response)


CURRENT = CurrentApp()


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".yaml" and file_path.parent.name == "gabbits":
        return GabbiFile.from_parent(parent, path=file_path)


# (name, backend, provider catalog): every database, and one node of a
# Galera cluster (marked ``galera``), with the catalog on as in production;
# SQLite once more with it off, so both of the candidate engine's stage-2
# indexes (catalog and SQL) answer every file without MySQL.
GABBI_RUNS = [(b, b, True) for b in fixtures.BACKENDS + ("galera",)] + [
    ("sqlite-no-catalog", "sqlite", False)
]


class GabbiFile(pytest.File):
    def collect(self):
        for name, backend, catalog in GABBI_RUNS:
            run = GabbiRun.from_parent(
                self, name=name, backend=backend, catalog=catalog
            )
            if backend == "galera":
                run.add_marker(pytest.mark.galera)
            yield run


class GabbiRun(pytest.Collector):
    def __init__(self, *, backend, catalog, **kw):
        super().__init__(**kw)
        self.backend = backend
        self.catalog = catalog
        self._stack = None

    def collect(self):
        suite_dict = gabbi_utils.load_yaml(yaml_file=str(self.path))
        handler_objects = [h() for h in gabbi_handlers.RESPONSE_HANDLERS]
        name = os.path.splitext(self.path.name)[0]
        self.suite = suitemaker.test_suite_from_dict(
            unittest.TestLoader(),
            name,
            suite_dict,
            str(self.path.parent),
            "placement.test",
            None,
            gabbi_fixtures,
            lambda: CURRENT,
            handlers=handler_objects,
        )
        for case in self.suite._tests:
            yield GabbiItem.from_parent(self, name=case.test_data["name"], case=case)

    def setup(self):
        # pytest calls teardown even when setup fails part way: the stack
        # undoes only what was done, last first (suite, catalog, app).
        self._stack = contextlib.ExitStack()
        fixtures.require_backend(self.backend)
        CURRENT.app, _ = self._stack.enter_context(fixtures.app(self.backend))
        self._stack.callback(setattr, CURRENT, "app", None)
        self._stack.enter_context(
            fixtures.overrides(**{"placement.provider_catalog": self.catalog})
        )
        self.suite.used_fixtures = []
        self.suite.start(unittest.TestResult())
        self._stack.callback(self.suite.stop)

    def teardown(self):
        if self._stack is not None:
            self._stack.close()
            self._stack = None


class GabbiItem(pytest.Item):
    def __init__(self, *, case, **kw):
        super().__init__(**kw)
        self.case = case

    def runtest(self):
        result = unittest.TestResult()
        self.case.run(result)
        problems = result.failures + result.errors
        if problems:
            raise GabbiFailure(problems[0][1])
        if result.skipped:
            pytest.skip(result.skipped[0][1])

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, GabbiFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "%s: %s" % (self.parent.name, self.name)


class GabbiFailure(Exception):
    pass
