"""Fixtures shared by the functional tests."""

import pytest

from tests import fixtures
from tests.functional import live_server


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    """A ready Database on a fresh SQLite, MySQL and PostgreSQL database."""
    fixtures.require_backend(request.param)
    with fixtures.database(request.param) as database:
        yield database


@pytest.fixture(params=live_server.SERVERS)
def api_server(request):
    """The name of each HTTP server ``placement-api --server`` offers."""
    return request.param
