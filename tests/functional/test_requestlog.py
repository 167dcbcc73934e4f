"""One INFO line per request on ``placement.requestlog``."""

import logging
import re

import pytest

from placement.api import middleware
from tests import fixtures
from tests import wsgi_client

LINE = re.compile(
    r'^(?P<addr>\S+) "(?P<method>[A-Z]+) (?P<path>\S+)" status: (?P<status>\d+)'
    r" len: (?P<len>\d+) microversion: (?P<version>\S+) asked: (?P<asked>\S+)"
    r" time: (?P<time>\d+\.\d{6}) request_id: (?P<rid>req-[0-9a-f-]{36})$"
)


@pytest.fixture(scope="module")
def app():
    with fixtures.app("sqlite") as (wsgi_app, _db):
        yield wsgi_app


def call(app, method, path, **kw):
    """(status, headers, body) from a client at 192.0.2.7."""
    r = wsgi_client.call(app, path, method, remote_addr="192.0.2.7", **kw)
    return r.status, r.headers, r.body


def logged(caplog):
    lines = [r for r in caplog.records if r.name == "placement.requestlog"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.INFO
    match = LINE.match(lines[0].getMessage())
    assert match, lines[0].getMessage()
    return match.groupdict()


ADMIN = {"x-auth-token": "admin"}


def test_line_fields(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    status, headers, body = call(
        app,
        "GET",
        "/resource_providers",
        query="name=a%20b&member_of=x",
        headers=dict(ADMIN, **{"openstack-api-version": "placement 1.14"}),
    )
    line = logged(caplog)
    assert line["addr"] == "192.0.2.7"
    assert line["method"] == "GET"
    assert line["path"] == "/resource_providers?name=a%20b&member_of=x"
    assert int(line["status"]) == status
    assert int(line["len"]) == len(body)
    assert line["version"] == "1.14"
    assert line["asked"] == "1.14"
    assert float(line["time"]) < 10
    assert line["rid"] == headers["x-openstack-request-id"]


def test_error_before_negotiation_has_no_version(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    status, headers, body = call(
        app, "GET", "/", headers={"openstack-api-version": "placement 2.0"}
    )
    line = logged(caplog)
    assert (line["status"], line["version"], line["asked"]) == ("406", "-", "2.0")
    assert int(line["len"]) == len(body) > 0


def test_unauthenticated_request_is_logged(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    call(app, "DELETE", "/traits/CUSTOM_X")
    line = logged(caplog)
    assert (line["method"], line["path"], line["status"]) == (
        "DELETE",
        "/traits/CUSTOM_X",
        "401",
    )


def test_no_content_length_logged_as_zero(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    status, _, body = call(app, "HEAD", "/healthcheck")
    line = logged(caplog)
    assert (line["status"], line["len"]) == ("204", "0")


def test_non_ascii_path_logged_percent_encoded(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    call(
        app,
        "GET",
        "/resource_classes/CUSTOM_\u00c9",
        headers=dict(ADMIN, **{"openstack-api-version": "placement 1.2"}),
    )
    assert logged(caplog)["path"] == "/resource_classes/CUSTOM_%C3%89"


def test_mount_prefix_in_path(app, caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")
    status, _, _ = call(
        app,
        "GET",
        "/traits",
        query="name=startswith:X",
        script_name="/placement",
        headers=dict(ADMIN, **{"openstack-api-version": "placement 1.6"}),
    )
    assert logged(caplog)["path"] == "/placement/traits?name=startswith:X"


def test_nothing_below_info(app, caplog):
    caplog.set_level(logging.WARNING, logger="placement.requestlog")
    call(app, "GET", "/")
    assert not [r for r in caplog.records if r.name == "placement.requestlog"]


def test_exception_escaping_inner_layer_is_logged_as_500(caplog):
    caplog.set_level(logging.INFO, logger="placement.requestlog")

    def broken(environ, start_response):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        call(
            middleware.RequestIdMiddleware(broken),
            "GET",
            "/x",
            headers={"openstack-api-version": "placement 1.30"},
        )
    line = logged(caplog)
    assert (line["path"], line["status"], line["version"], line["asked"]) == (
        "/x",
        "500",
        "-",
        "1.30",
    )
