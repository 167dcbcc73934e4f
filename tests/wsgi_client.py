"""Calling a WSGI app in-process from pytest tests (the one test client
without an HTTP stack), and building the full pipeline with configuration
overrides."""

import contextlib
import io
import json
import wsgiref.util

from placement import deploy
from tests import fixtures


class Response:
    def __init__(self, status, headers, body):
        self.status = int(status.split()[0])
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def json(self):
        return json.loads(self.body)


def call(
    app,
    path,
    method="GET",
    body=None,
    query=None,
    headers=None,
    script_name="",
    remote_addr="127.0.0.1",
    **header_names,
):
    """One direct WSGI call with the environ a PEP 3333 server builds (the
    path percent-decoded, its UTF-8 bytes carried as latin-1).

    ``path`` may carry ``?query`` when ``query`` is None. ``body``: bytes
    sent as they are, anything else as JSON (with its content type).
    Headers come from ``headers`` ({"x-auth-token": "admin"}) and from
    keywords (``x_auth_token="admin"``).
    """
    if query is None:
        path, _, query = path.partition("?")
    sent = dict(headers or {}, **header_names)
    if body is None:
        data = b""
    elif isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(body).encode()
        sent.setdefault("content-type", "application/json")
    environ = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path.encode("utf-8", "surrogatepass").decode("latin-1"),
        "QUERY_STRING": query,
        "REMOTE_ADDR": remote_addr,
        "wsgi.input": io.BytesIO(data),
        "CONTENT_LENGTH": str(len(data)) if data else "",
    }
    wsgiref.util.setup_testing_defaults(environ)
    for name, value in sent.items():
        key = name.upper().replace("-", "_")
        environ[key if key == "CONTENT_TYPE" else "HTTP_" + key] = value
    seen = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"], seen["headers"] = status, response_headers

    data = b"".join(app(environ, start_response))
    return Response(seen["status"], seen["headers"], data)


@contextlib.contextmanager
def pipeline(**overrides):
    """The full pipeline over a fresh SQLite database with ``overrides``
    (``fixtures.overrides``; noauth2 unless given) while it is built and
    used."""
    with fixtures.overrides(**overrides) as conf:
        with fixtures.database("sqlite") as db:
            yield deploy.build_app(conf, db=db, sync_schema=False)
