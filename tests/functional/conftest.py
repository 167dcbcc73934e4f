"""Fixtures shared by the functional tests."""

import pytest

from tests import fixtures
from tests.functional import live_server

# A ready Database on a fresh SQLite, MySQL and PostgreSQL database.
db = fixtures.db_fixture(fixtures.BACKENDS)


@pytest.fixture(params=live_server.SERVERS)
def api_server(request):
    """The name of each HTTP server ``placement-api --server`` offers."""
    return request.param
