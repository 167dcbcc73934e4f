"""The operator console's static files at ``/ui/`` (doc/console.md), and
its icon at ``/favicon.ico``.

Files come only from the ``placement/ui`` package directory, by exact
name: no directory listing, no path walking. Every answer carries a strict
Content-Security-Policy: scripts and styles from this origin only (no
inline script), API calls to this origin only, and no framing. The pages
hold no privilege: they call the public API with the token the operator
signs in with.
"""

import os
from collections.abc import Callable
from typing import Any

PREFIX = "/ui"
# Browsers ask for it at the root of any page they show (an API answer
# too): served with the console's files, without a token, so that no
# page logs a 401 for it.
FAVICON = "/favicon.ico"
DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "ui")
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


def owns(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/") or path == FAVICON


def _files() -> dict[str, str]:
    return {
        name: os.path.join(DIRECTORY, name)
        for name in os.listdir(DIRECTORY)
        if os.path.splitext(name)[1] in TYPES
    }


FILES = _files()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """GET/HEAD of ``/ui/`` (the console page) and its files."""
    path = environ.get("PATH_INFO", "")
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return _plain(start_response, "405 Method Not Allowed", [("Allow", "GET")])
    if path == PREFIX:
        location = environ.get("SCRIPT_NAME", "") + PREFIX + "/"
        return _plain(start_response, "301 Moved Permanently", [("Location", location)])
    if path == FAVICON:
        name = FAVICON[1:]
    else:
        name = path[len(PREFIX) + 1 :] or "index.html"
    filename = FILES.get(name)
    if filename is None:
        return _plain(start_response, "404 Not Found", [])
    with open(filename, "rb") as f:
        body = f.read()
    start_response(
        "200 OK",
        [
            ("Content-Type", TYPES[os.path.splitext(name)[1]]),
            ("Content-Length", str(len(body))),
            *SECURITY_HEADERS,
        ],
    )
    return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]


def _plain(start_response, status, headers):
    start_response(
        status,
        [("Content-Type", "text/plain"), ("Content-Length", "0"), *headers]
        + SECURITY_HEADERS,
    )
    return [b""]
