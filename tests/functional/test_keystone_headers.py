"""Under ``[api] auth_strategy = keystone`` the identity headers a client
sends (``X-Roles``, ``X-Project-Id``, ``X-User-Id``, ``X-Service-Roles``,
``X-Identity-Status`` and the ``X-Tenant-*`` aliases) are never trusted:
keystonemiddleware's auth_token removes them and sets its own from the
token it validated (doc/api.md "Authentication").

Nothing is mocked: a real auth_token validates tokens against a small
identity service on 127.0.0.1 (keystone's v3 token API: its own service
token, a catalog, token validation), and the answers a client sees are
those of the whole pipeline over SQLite.
"""

import contextlib
import http.server
import json
import threading

import pytest
from keystoneauth1 import loading

from placement import conf as placement_conf
from tests import fixtures
from tests.wsgi_client import call
from tests.wsgi_client import pipeline

GROUP = "keystone_authtoken"
_DOMAIN = {"id": "default", "name": "Default"}
SERVICE_TOKEN = "service-token"


def _token(user, project, roles):
    return {
        "methods": ["password"],
        "issued_at": "2026-01-01T00:00:00.000000Z",
        "expires_at": "2999-01-01T00:00:00.000000Z",
        "user": {"id": user, "name": user, "domain": _DOMAIN},
        "project": {"id": project, "name": project, "domain": _DOMAIN},
        "roles": [{"id": "r-" + r, "name": r} for r in roles],
    }


# What the identity service knows: token -> its body.
TOKENS = {
    "reader-token": _token("reader-user", "reader-project", ["reader"]),
    "admin-token": _token("admin-user", "admin-project", ["admin"]),
}


class Identity(http.server.BaseHTTPRequestHandler):
    """The part of keystone's v3 API auth_token uses."""

    def log_message(self, *args):
        pass

    def _answer(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _version(self):
        return {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": self.server.url + "/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack"}
            ],
        }

    def do_GET(self):
        path = self.path.rstrip("/")
        if path == "":
            self._answer(300, {"versions": {"values": [self._version()]}})
        elif path == "/v3":
            self._answer(200, {"version": self._version()})
        elif path.startswith("/v3/auth/tokens"):
            self.server.validated.append(self.headers["X-Subject-Token"])
            if self.headers["X-Auth-Token"] != SERVICE_TOKEN:
                self._answer(401, {"error": {"code": 401}})
                return
            subject = self.headers["X-Subject-Token"]
            if subject not in TOKENS:
                self._answer(404, {"error": {"code": 404}})
                return
            self._answer(
                200, {"token": TOKENS[subject]}, [("X-Subject-Token", subject)]
            )
        else:
            self._answer(404, {"error": {"code": 404}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.rstrip("/") != "/v3/auth/tokens":
            self._answer(404, {"error": {"code": 404}})
            return
        token = _token("placement", "service", ["service", "admin"])
        endpoints = [
            {
                "id": "e-" + interface,
                "interface": interface,
                "region": "RegionOne",
                "region_id": "RegionOne",
                "url": self.server.url + "/v3",
            }
            for interface in ("public", "internal", "admin")
        ]
        token["catalog"] = [
            {"id": "s1", "type": "identity", "name": "keystone", "endpoints": endpoints}
        ]
        self._answer(201, {"token": token}, [("X-Subject-Token", SERVICE_TOKEN)])


@contextlib.contextmanager
def identity_service():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Identity)
    server.url = "http://127.0.0.1:%d" % server.server_address[1]
    server.validated = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def keystone_app(identity, delay_auth_decision=False):
    conf = fixtures.configure()
    placement_conf.register_keystone_opts(conf)
    # auth_token registers its auth plugin's options when it loads it:
    # registered here first, so that they can be set.
    conf.register_opts(loading.get_auth_plugin_conf_options("v3password"), group=GROUP)
    options = {
        "api.auth_strategy": "keystone",
        GROUP + ".auth_type": "v3password",
        GROUP + ".auth_url": identity.url + "/v3",
        GROUP + ".username": "placement",
        GROUP + ".password": "secret",
        GROUP + ".user_domain_id": "default",
        GROUP + ".project_name": "service",
        GROUP + ".project_domain_id": "default",
        GROUP + ".www_authenticate_uri": identity.url,
        GROUP + ".auth_version": "v3",
        GROUP + ".delay_auth_decision": delay_auth_decision,
        GROUP + ".http_request_max_retries": 0,
    }
    with pipeline(**options) as app:
        yield app


# Every identity header auth_token owns, as a client would forge them to
# be an admin and a service of another project.
FORGED = {
    "x_roles": "admin,service",
    "x_role": "admin",
    "x_project_id": "other-project",
    "x_project_name": "other",
    "x_user_id": "admin",
    "x_user": "admin",
    "x_user_name": "admin",
    "x_service_roles": "service,admin",
    "x_service_project_id": "other-project",
    "x_identity_status": "Confirmed",
    "x_service_identity_status": "Confirmed",
    "x_tenant_id": "other-project",
    "x_tenant_name": "other",
    "x_tenant": "other",
    "x_is_admin_project": "True",
}
V = {"openstack_api_version": "placement 1.39", "accept": "application/json"}


@pytest.fixture(scope="module")
def identity():
    with identity_service() as server:
        yield server


@pytest.fixture(scope="module")
def app(identity):
    with keystone_app(identity) as app:
        yield app


def _status(app, path, method="GET", body=None, query="", **headers):
    return call(app, path, method, body=body, query=query, **V, **headers).status


def test_the_tokens_roles_decide_not_the_headers(app, identity):
    # The reader's token validated by the identity service: every forged
    # header is ignored, the reader stays a reader of its own project.
    reader = dict(FORGED, x_auth_token="reader-token")
    assert _status(app, "/resource_providers", **reader) == 403
    assert _status(app, "/resource_providers", "POST", {"name": "x"}, **reader) == 403
    assert _status(app, "/reshaper", "POST", {}, **reader) == 403
    assert _status(app, "/usages", query="project_id=other-project", **reader) == 403
    assert _status(app, "/usages", query="project_id=reader-project", **reader) == 200
    assert "reader-token" in identity.validated
    # The same calls with a token that carries the role work: the 403s
    # above came from the roles, not from a broken pipeline.
    admin = dict(FORGED, x_auth_token="admin-token")
    assert _status(app, "/resource_providers", **admin) == 200


@pytest.mark.parametrize("token", [None, "forged-token"])
def test_forged_headers_without_a_valid_token_get_nothing(app, token):
    headers = dict(FORGED)
    if token:
        headers["x_auth_token"] = token
    for path in ("/resource_providers", "/usages", "/resource_classes"):
        assert _status(app, path, query="project_id=other-project", **headers) == 401


@pytest.mark.parametrize("token", [None, "forged-token"])
def test_delayed_decision_still_drops_forged_headers(identity, token):
    # delay_auth_decision lets an unauthenticated request through to the
    # app with X-Identity-Status: Invalid; the forged user is gone, so the
    # app itself refuses it.
    headers = dict(FORGED)
    if token:
        headers["x_auth_token"] = token
    with keystone_app(identity, delay_auth_decision=True) as app:
        assert _status(app, "/resource_providers", **headers) == 401
        assert (
            _status(app, "/resource_providers", "POST", {"name": "x"}, **headers) == 401
        )
        assert _status(app, "/resource_providers", x_auth_token="admin-token") == 200
