"""The WSGI layers around the falcon app (doc/architecture.md "Request
path"): request ids,
noauth2, the context 401, keystone auth_token and CORS."""

import re
import urllib.parse

import pytest
from keystonemiddleware import auth_token
from keystonemiddleware.auth_token import _exceptions as ks_exceptions
from oslo_context import context as oslo_context

from placement import conf as placement_conf
from placement import context
from placement.api import middleware
from tests import fixtures
from tests.wsgi_client import call
from tests.wsgi_client import pipeline

KEYSTONE = "http://keystone.example/identity"
ORIGIN = "http://dashboard.example"


@pytest.fixture
def noauth():
    with pipeline() as app:
        yield app


# -- request id --------------------------------------------------------------

REQUEST_ID = re.compile(
    r"^req-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"
    r"[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)


def test_every_response_has_a_fresh_request_id(noauth):
    first = call(noauth, "/")
    second = call(noauth, "/resource_classes")  # a 401
    assert REQUEST_ID.match(first.headers["x-openstack-request-id"])
    assert REQUEST_ID.match(second.headers["x-openstack-request-id"])
    assert (
        first.headers["x-openstack-request-id"]
        != second.headers["x-openstack-request-id"]
    )


def test_error_body_request_id_matches_header(noauth):
    response = call(noauth, "/nowhere", x_auth_token="admin")
    assert response.status == 404
    assert (
        response.json()["errors"][0]["request_id"]
        == response.headers["x-openstack-request-id"]
    )


def _global_id(inbound):
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response("200 OK", [("X-Openstack-Request-Id", inbound)])
        return [b""]

    response = call(
        middleware.RequestIdMiddleware(app), "/", x_openstack_request_id=inbound
    )
    assert response.headers["x-openstack-request-id"] != inbound
    return seen.get(middleware.GLOBAL_REQUEST_ID_ENV)


def test_inbound_request_id_becomes_global_id_never_echoed():
    inbound = "req-2f2b9e0e-6a3c-4bd3-9d5e-2c7f1f6b6f1a"
    assert _global_id(inbound) == inbound
    # Only the lower-case canonical form is kept.
    assert _global_id(inbound.upper()) is None
    assert _global_id("2f2b9e0e-6a3c-4bd3-9d5e-2c7f1f6b6f1a") is None


def test_logged_path_percent_encodes_as_sent():
    """Each byte of a path is logged as urllib.parse.quote writes it (the
    paths it would leave alone are not given to it)."""
    for byte in range(256):
        path = "/x" + chr(byte)
        expected = urllib.parse.quote(
            path.encode("latin-1"), safe="/:@!$&'()*+,;=-._~%"
        )
        assert middleware.logged_path({"PATH_INFO": path}) == expected


@pytest.mark.parametrize(
    "header, asked",
    [
        ("placement 1.39", "1.39"),
        ("  PLACEMENT  1. 2 ", "1.2"),
        ("compute 2.1", "compute2.1"),
        ("", "-"),
    ],
)
def test_asked_version(header, asked):
    for _ in range(2):  # computed, then kept
        assert middleware._asked({"HTTP_OPENSTACK_API_VERSION": header}) == asked


@pytest.mark.parametrize("accept", [None, "*/*"])
def test_missing_or_any_accept_becomes_json(accept):
    seen = {}

    def app(environ, start_response):
        seen["accept"] = environ["HTTP_ACCEPT"]
        start_response("204 No Content", [])
        return [b""]

    headers = {"accept": accept} if accept else {}
    call(middleware.RequestIdMiddleware(app), "/", **headers)
    assert seen["accept"] == "application/json"


# -- noauth2 and the context -------------------------------------------------


def _identity(**headers):
    """The identity NoAuthMiddleware hands on for a request."""
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response("204 No Content", [])
        return [b""]

    response = call(middleware.NoAuthMiddleware(app), "/x", **headers)
    return response, seen


def test_noauth_root_needs_no_token(noauth):
    assert call(noauth, "/").status == 200


@pytest.mark.parametrize("path", ["/resource_classes", ""])
def test_noauth_other_paths_need_a_token(noauth, path):
    response = call(noauth, path)
    assert response.status == 401
    assert response.json()["code"] == "401 Unauthorized"
    assert response.json()["title"] == "Unauthorized"
    assert "openstack-api-version" not in response.headers


@pytest.mark.parametrize(
    "token,user,project,roles",
    [
        ("admin", "admin", "admin", "admin"),
        ("alice", "alice", "alice", ""),
        ("alice:proj1", "alice", "proj1", ""),
        ("admin:proj2", "admin", "proj2", "admin"),
        ("bob:", "bob", "bob", ""),
    ],
)
def test_noauth_token_is_user_and_project(token, user, project, roles):
    _, env = _identity(x_auth_token=token)
    assert env["HTTP_X_USER_ID"] == user
    assert env["HTTP_X_PROJECT_ID"] == project
    assert env["HTTP_X_ROLES"] == roles


def test_noauth_x_roles_replaces_roles():
    _, env = _identity(x_auth_token="admin", x_roles="reader,service")
    assert env["HTTP_X_ROLES"] == "reader,service"


@pytest.mark.parametrize(
    "headers,user,project",
    [
        ({"x_project_id": "P"}, "alice", "P"),
        ({"x_tenant_id": "T"}, "alice", "T"),
        ({"x_project_id": "P", "x_tenant_id": "T"}, "alice", "P"),
        ({"x_user_id": "U"}, "U", "proj1"),
        ({"x_user_id": "U", "x_project_id": "P"}, "U", "P"),
    ],
)
def test_noauth_identity_headers_win_over_the_token(headers, user, project):
    seen = {}

    def app(environ, start_response):
        seen["ctx"] = environ[middleware.CONTEXT_ENV]
        start_response("204 No Content", [])
        return [b""]

    app = middleware.NoAuthMiddleware(
        middleware.ContextMiddleware(app, db=None, enforcer=None)
    )
    call(app, "/x", x_auth_token="alice:proj1", **headers)
    assert (seen["ctx"].user_id, seen["ctx"].project_id) == (user, project)


def test_noauth_system_scope_drops_the_project():
    _, env = _identity(
        x_auth_token="admin", openstack_system_scope="all", x_project_id="sneaky"
    )
    assert "HTTP_X_PROJECT_ID" not in env


def test_context_needs_a_user():
    app = middleware.ContextMiddleware(lambda e, s: [], db=None, enforcer=None)
    response = call(app, "/resource_providers")
    assert response.status == 401
    assert response.json() == {
        "message": "Unauthorized",
        "code": "401 Unauthorized",
        "title": "Unauthorized",
    }


def test_context_carries_identity():
    seen = {}

    def app(environ, start_response):
        seen["ctx"] = environ[middleware.CONTEXT_ENV]
        start_response("204 No Content", [])
        return [b""]

    call(
        middleware.ContextMiddleware(app, db="db", enforcer=None),
        "/x",
        x_user_id="u",
        x_project_id="p",
        x_roles="reader, service",
        openstack_system_scope="all",
    )
    ctx = seen["ctx"]
    assert (ctx.user_id, ctx.project_id, ctx.roles, ctx.system_scope, ctx.db) == (
        "u",
        "p",
        ["reader", "service"],
        "all",
        "db",
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"x_user": "u", "x_tenant": "t", "x_roles": "a"},
        {
            "x_user_id": "u",
            "x_user_name": "un",
            "x_project_id": "p",
            "x_tenant_id": "t",
            "x_project_name": "pn",
            "x_domain_id": "d",
            "x_user_domain_id": "ud",
            "x_project_domain_name": "pdn",
            "x_auth_token": "tok",
            "x_service_roles": "s1, s2",
            "x_service_user_id": "su",
            "x_is_admin_project": "False",
            "openstack_system_scope": "all",
        },
        # Keys of one attribute ranked (the first present wins).
        {
            "x_user": "u2",
            "x_user_id": "u",
            "x_tenant": "t2",
            "x_tenant_id": "t",
            "x_storage_token": "s",
            "x_auth_token": "tok",
            "x_tenant_name": "tn2",
            "x_project_name": "pn",
        },
        {"x_tenant": "t2", "x_user": "u2", "x_storage_token": "s"},
    ],
)
def test_one_context_per_request_as_from_environ(headers):
    """The request id layer's context, filled in by the context layer, is
    the request's one context, and holds what oslo.context's from_environ
    reads from the same headers."""
    seen = {}

    def app(environ, start_response):
        seen["environ"] = dict(environ)
        seen["ctx"] = environ[middleware.CONTEXT_ENV]
        seen["current"] = oslo_context.get_current()
        start_response("204 No Content", [])
        return [b""]

    app = middleware.RequestIdMiddleware(
        middleware.ContextMiddleware(app, db="db", enforcer=None)
    )
    response = call(app, "/x", **headers)
    ctx, environ = seen["ctx"], seen["environ"]
    made = context.RequestContext.from_environ(
        environ,
        roles=ctx.roles,
        request_id=environ[middleware.REQUEST_ID_ENV],
        global_request_id=None,
        db="db",
        enforcer=None,
    )
    assert seen["current"] is ctx
    assert ctx.request_id == response.headers["x-openstack-request-id"]
    assert vars(ctx) == vars(made)


def test_a_request_context_is_what_its_init_makes():
    """The request id layer's context, copied from a blank one's
    attributes, has those RequestContext() gives, lists of its own, and is
    the thread's current context."""
    made = context.of_request("req-1", "req-2")
    assert oslo_context.get_current() is made
    assert type(made) is context.RequestContext
    assert vars(made) == vars(
        context.RequestContext(request_id="req-1", global_request_id="req-2")
    )
    other = context.of_request("req-3", None)
    assert other.roles is not made.roles
    assert other.service_roles is not made.service_roles
    assert (other.request_id, other.global_request_id) == ("req-3", None)


# -- keystone ----------------------------------------------------------------

TOKENS = {}
_DOMAIN = {"id": "default", "name": "Default"}
# What keystone's token validation answers for a project-scoped admin.
V3_TOKEN = {
    "token": {
        "methods": ["password"],
        "issued_at": "2026-01-01T00:00:00.000000Z",
        "expires_at": "2999-01-01T00:00:00.000000Z",
        "user": {"id": "u1", "name": "user", "domain": _DOMAIN},
        "project": {"id": "p1", "name": "project", "domain": _DOMAIN},
        "roles": [{"id": "r1", "name": "admin"}],
    }
}


@pytest.fixture
def keystone(monkeypatch):
    """auth_strategy=keystone, with token validation answered locally."""

    def fetch_token(self, token, **kwargs):
        if token in TOKENS:
            return TOKENS[token]
        raise ks_exceptions.InvalidToken()

    monkeypatch.setattr(auth_token.AuthProtocol, "fetch_token", fetch_token)
    TOKENS["good"] = V3_TOKEN
    # As parse_args does for keystone: its groups, on the tests' conf.
    placement_conf.register_keystone_opts(fixtures.configure())
    with pipeline(
        **{
            "api.auth_strategy": "keystone",
            "keystone_authtoken.www_authenticate_uri": KEYSTONE,
        }
    ) as app:
        yield app


@pytest.mark.parametrize("path", ["/", ""])
def test_keystone_version_document_is_open(keystone, path):
    response = call(keystone, path)
    assert response.status == 200
    assert response.json()["versions"][0]["max_version"] == "1.39"


@pytest.mark.parametrize("headers", [{}, {"x_auth_token": "bogus"}])
def test_keystone_401_is_its_own_format(keystone, headers):
    response = call(keystone, "/resource_classes", **headers)
    assert response.status == 401
    assert response.json()["error"]["code"] == 401
    assert response.json()["error"]["title"] == "Unauthorized"
    assert response.headers["www-authenticate"] == 'Keystone uri="%s"' % (KEYSTONE)
    assert "openstack-api-version" not in response.headers
    assert "x-openstack-request-id" in response.headers


def test_keystone_valid_token_reaches_placement(keystone):
    response = call(
        keystone,
        "/resource_classes",
        x_auth_token="good",
        openstack_api_version="placement 1.2",
    )
    assert response.status == 200
    assert "VCPU" in [c["name"] for c in response.json()["resource_classes"]]


def test_keystone_client_identity_headers_without_token(keystone):
    # auth_token strips client-sent identity headers: still no entry.
    response = call(keystone, "/resource_classes", x_user_id="admin", x_roles="admin")
    assert response.status == 401


# -- CORS --------------------------------------------------------------------


@pytest.fixture
def cors():
    with pipeline(**{"cors.allowed_origin": [ORIGIN]}) as app:
        yield app


def test_cors_preflight(cors):
    response = call(
        cors,
        "/resource_providers",
        "OPTIONS",
        origin=ORIGIN,
        access_control_request_method="PUT",
        access_control_request_headers="openstack-api-version",
    )
    assert response.status == 200
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["access-control-allow-methods"] == "PUT"
    assert response.headers["access-control-allow-headers"] == "openstack-api-version"


def test_cors_preflight_unknown_origin_gets_no_grant(cors):
    response = call(
        cors,
        "/resource_providers",
        "OPTIONS",
        origin="http://evil.example",
        access_control_request_method="GET",
    )
    assert "access-control-allow-origin" not in response.headers


def test_cors_exposes_placement_headers(cors):
    response = call(cors, "/", origin=ORIGIN)
    assert response.headers["access-control-allow-origin"] == ORIGIN
    exposed = response.headers["access-control-expose-headers"].split(",")
    assert "OpenStack-API-Version" in exposed
    assert "X-Openstack-Request-Id" in exposed


def test_no_cors_without_allowed_origin(noauth):
    response = call(noauth, "/", origin=ORIGIN)
    assert "access-control-allow-origin" not in response.headers


# -- HTTP proxy headers ([oslo_middleware] enable_proxy_headers_parsing) -----

PROXIED = {"x_forwarded_proto": "https", "x_forwarded_host": "placement.example"}


def _created_location(app, **headers):
    response = call(
        app,
        "/resource_providers",
        "POST",
        body={"name": "rp"},
        x_auth_token="admin",
        accept="application/json",
        openstack_api_version="placement 1.19",
        **headers,
    )
    assert response.status == 201, response.body
    return response


@pytest.fixture
def proxied():
    with pipeline(**{"oslo_middleware.enable_proxy_headers_parsing": True}) as app:
        yield app


def test_proxy_headers_ignored_by_default(noauth):
    location = _created_location(noauth, **PROXIED).headers["location"]
    assert re.fullmatch(
        r"http://127\.0\.0\.1/resource_providers/[-0-9a-f]+", location
    ), location


def test_proxy_headers_set_scheme_and_host(proxied):
    response = _created_location(proxied, **PROXIED)
    assert re.fullmatch(
        r"https://placement\.example/resource_providers/[-0-9a-f]+",
        response.headers["location"],
    ), response.headers["location"]
    # The layer is outside request-id: every response still carries one.
    assert response.headers["x-openstack-request-id"].startswith("req-")
    # An empty 201 passes the webob round trip without gaining a type.
    assert "content-type" not in response.headers and response.body == b""


def test_rfc7239_forwarded_header_and_prefix(proxied):
    location = _created_location(
        proxied,
        forwarded="for=192.0.2.60;proto=https;host=lb.example",
        x_forwarded_prefix="/placement",
    ).headers["location"]
    assert re.fullmatch(
        r"https://lb\.example/placement/resource_providers/[-0-9a-f]+", location
    ), location


def test_without_proxy_headers_nothing_changes(proxied):
    location = _created_location(proxied).headers["location"]
    assert location.startswith("http://127.0.0.1/resource_providers/")
