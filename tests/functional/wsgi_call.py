"""One direct WSGI call, no HTTP stack: the environ a PEP 3333 server
builds (the path percent-decoded, its UTF-8 bytes carried as latin-1)."""

import io
import wsgiref.util


def call(
    app,
    method,
    path,
    query="",
    body=b"",
    headers=None,
    script_name="",
    remote_addr="127.0.0.1",
):
    """(status int, {lower-case header: value}, body bytes)."""
    environ = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path.encode("utf-8", "surrogatepass").decode("latin-1"),
        "QUERY_STRING": query,
        "REMOTE_ADDR": remote_addr,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)) if body else "",
    }
    wsgiref.util.setup_testing_defaults(environ)
    for name, value in (headers or {}).items():
        key = name.upper().replace("-", "_")
        environ[key if key == "CONTENT_TYPE" else "HTTP_" + key] = value
    seen = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"] = int(status.split()[0])
        seen["headers"] = {k.lower(): v for k, v in response_headers}

    data = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], data
