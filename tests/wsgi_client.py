"""Calling a WSGI app in-process from pytest tests, and building the full
pipeline with configuration overrides."""

import contextlib
import json
import wsgiref.util

from placement import deploy
from placement import policy
from tests import fixtures


class Response:
    def __init__(self, status, headers, body):
        self.status = int(status.split()[0])
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def json(self):
        return json.loads(self.body)


def call(app, path, method="GET", body=None, **headers):
    """``headers`` as keyword names: ``x_auth_token="admin"``."""
    path, _, query = path.partition("?")
    environ = {
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "REQUEST_METHOD": method,
        "QUERY_STRING": query,
    }
    wsgiref.util.setup_testing_defaults(environ)
    environ.update(("HTTP_" + k.upper(), v) for k, v in headers.items())
    if body is not None:
        data = json.dumps(body).encode()
        environ.update(CONTENT_TYPE="application/json", CONTENT_LENGTH=str(len(data)))
        environ["wsgi.input"].write(data)
        environ["wsgi.input"].seek(0)
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, headers

    body = b"".join(app(environ, start_response))
    return Response(seen["status"], seen["headers"], body)


@contextlib.contextmanager
def pipeline(**overrides):
    """The full pipeline over a fresh SQLite database with ``overrides``
    ("group.option": value; noauth2 unless given) applied while it is
    built and used. The policy enforcer is rebuilt for them."""
    conf = fixtures.configure()
    overrides.setdefault("api.auth_strategy", "noauth2")
    for key, value in overrides.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group)
    policy.reset()
    try:
        with fixtures.database("sqlite") as db:
            yield deploy.build_app(conf, db=db, sync_schema=False)
    finally:
        for key in overrides:
            group, _, name = key.rpartition(".")
            conf.clear_override(name, group=group)
        conf.set_override("auth_strategy", "noauth2", group="api")
        policy.reset()
