"""Fixtures shared by the functional tests."""

import pytest

from tests import fixtures


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    """A ready Database on a fresh SQLite, MySQL and PostgreSQL database."""
    fixtures.require_backend(request.param)
    with fixtures.database(request.param) as database:
        yield database
