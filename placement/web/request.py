"""Reading requests and writing responses, the way every handler does.

Handlers get a falcon ``req``/``resp``; ``req.context`` carries
``ctx`` (the RequestContext) and ``version`` (the negotiated microversion),
which handlers read directly: ``req.context.ctx``, ``req.context.version``.
"""

import datetime
import functools
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import falcon
import jsonschema
import jsonschema_rs
import orjson
from oslo_utils import uuidutils

from placement import versions
from placement.web import errors

# Items one request may name (doc/api.md "Errors"): list elements and
# object members at any depth of a body, comma-separated values of a query
# string. A statement binds at most about one parameter per item, so this
# keeps every statement under the smallest common limits on bound
# parameters (SQLite's default 32,766; psycopg's 65,535) and far under
# MySQL's max_allowed_packet.
MAX_ITEMS = 30_000


def _too_many_items(what: str) -> errors.BadRequest:
    return errors.BadRequest(
        "The request names more than %d items (%s); send it in smaller parts."
        % (MAX_ITEMS, what)
    )


def _body_items(data: Any) -> int:
    """List elements and object members in ``data``, counted until past
    MAX_ITEMS."""
    count = 0
    stack = [data]
    while stack and count <= MAX_ITEMS:
        node = stack.pop()
        if isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            count += len(node)
            stack.extend(node)
    return count


def json_body(
    req: falcon.Request,
    schema: Mapping[str, Any] | None = None,
    refused: Callable[[], Any] | None = None,
) -> Any:
    """The request's JSON document, validated against ``schema``.
    ``refused`` is called before a refused body is reported: a lookup
    whose own error (such as a 404) comes first, done only then so that
    an accepted body costs no separate lookup."""
    if refused is None:
        return _json_body(req, schema)
    try:
        return _json_body(req, schema)
    except errors.BadRequest:
        refused()
        raise


def _json_body(req, schema):
    raw = req.bounded_stream.read()
    try:
        data = orjson.loads(raw) if raw else orjson.loads(b"")
    except orjson.JSONDecodeError as e:
        raise errors.BadRequest("Malformed JSON: %s" % e)
    if _body_items(data) > MAX_ITEMS:
        raise _too_many_items("list elements and object members in the body")
    if schema is not None:
        try:
            validate(data, schema)
        except errors.BadRequest:
            if not _LONG_INTEGER.search(raw):
                raise
            # orjson reads an integer past 64 bits as a float: the body is
            # judged again as sent (its message quotes the number so),
            # only when refused, so that an accepted body is parsed once.
            data = json.loads(raw)
            validate(data, schema)
    return data


# 19 digits in a row: maybe an integer orjson read as a float (one below
# -2**63 or from 2**64).
_LONG_INTEGER = re.compile(rb"[0-9]{19}")


FORMAT_CHECKER = jsonschema.FormatChecker()


@FORMAT_CHECKER.checks("uuid")
def _uuid_like(instance):
    # Upstream's "UUID-like": dashless, braced and urn:uuid: spellings
    # pass (doc/api.md "Query values"), unlike jsonschema's own dashed-only
    # "uuid" format.
    return not isinstance(instance, str) or uuidutils.is_uuid_like(instance)


# A pattern's closing "$" is the end of the value: Python's re also lets
# "$" match before a final newline, which would let "INSTANCE\n" pass
# ^[A-Z0-9_]+$ (the schemas' patterns are written for ECMA-262, where it
# does not).
_END = re.compile(r"(?<!\\)\$$")


@functools.lru_cache(maxsize=None)
def _strict_pattern(pattern: str) -> re.Pattern:
    return re.compile(_END.sub(r"\\Z", pattern))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _strict_pattern(pattern).search(
        instance
    ):
        yield jsonschema.ValidationError("%r does not match %r" % (instance, pattern))


@functools.lru_cache(maxsize=None)
def _validator_class(cls: Any) -> Any:
    return jsonschema.validators.extend(cls, {"pattern": _pattern})


# The compiled checks of the schemas (constants) by id, each with its
# schema (so that the id stays its own).
_CHECKS: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _check(schema: Mapping[str, Any]) -> Any:
    """``schema``'s compiled check (jsonschema_rs, with our "uuid"
    format): as strict as jsonschema with our pattern and format, or
    stricter, never laxer (tests/unit/test_request_validate.py)."""
    held = _CHECKS.get(id(schema))
    if held is None or held[0] is not schema:
        check = jsonschema_rs.validator_for(
            _python_keys(schema), validate_formats=True, formats={"uuid": _uuid_like}
        )
        held = _CHECKS[id(schema)] = (schema, check)
    return held[1]


def compile_checks(schemas: Iterable[Mapping[str, Any]]) -> None:
    """Compile the checks of ``schemas`` ahead of the requests checked
    against them (about 1 ms each: a worker's first request of each kind
    paid it)."""
    for schema in schemas:
        _check(schema)


def _python_keys(schema: Any) -> Any:
    """``schema`` with each ``patternProperties`` pattern's closing "$"
    also matching before a final newline, as jsonschema matches them
    (Python's re; only "pattern" is held to the end of the value)."""
    if isinstance(schema, list):
        return [_python_keys(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {key: _python_keys(value) for key, value in schema.items()}
    if isinstance(schema.get("patternProperties"), Mapping):
        out["patternProperties"] = {
            _END.sub(r"\\n?$", pattern): _python_keys(sub)
            for pattern, sub in schema["patternProperties"].items()
        }
    return out


def validate(
    data: Any, schema: Mapping[str, Any], prefix: str = "JSON does not validate"
) -> None:
    # Passed by the compiled check: about 1 us rather than 120 for a
    # claim's body (the PUT's CPU fell 9%). Refused: judged again by
    # jsonschema, whose best_match error is the one clients see.
    if _check(schema).is_valid(data):
        return
    # jsonschema.validate without its per-call check of the schema itself
    # against the meta-schema (about 2 ms a request; ours are constants,
    # exercised by the tests): the same best_match error.
    validator = _validator_class(jsonschema.validators.validator_for(schema))(
        schema, format_checker=FORMAT_CHECKER
    )
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise errors.BadRequest("%s: %s" % (prefix, schema_error_text(error)))


def schema_error_text(error: Any) -> str:
    """The whole text of a schema failure on one line: message, the
    validator and schema path, the schema fragment, the instance path and
    the instance, as clients written for the reference compare it."""
    return str(error).replace("\n", " ")


QUERY_PREFIX = "Invalid query string parameters"


def query_pairs(req: falcon.Request) -> list[tuple[str, str]]:
    """Every (name, value) of the query string, in order; 400 on bad UTF-8."""
    qs = req.query_string
    if not qs:
        return []
    try:
        pairs = urllib.parse.parse_qsl(
            qs, keep_blank_values=True, encoding="utf-8", errors="strict"
        )
    except UnicodeDecodeError:
        raise errors.BadRequest(
            "Invalid query string parameters: query string is not UTF-8"
        )
    if sum(value.count(",") + 1 for _name, value in pairs) > MAX_ITEMS:
        raise _too_many_items("comma-separated values in the query string")
    return pairs


def query_last(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Single-valued view: the last occurrence of each name wins."""
    return dict(pairs)


def validate_query(
    pairs: list[tuple[str, str]],
    schema: Mapping[str, Any],
    every: Collection[str] = (),
) -> None:
    """Apply a query-string JSON schema to the last value of each name.

    The names in ``every`` have each earlier occurrence checked too, in
    place of the last one, so a handler may use any of them.
    """
    last = query_last(pairs)
    _validate_query(last, schema)
    for name, value in pairs:
        if name in every and value != last[name]:
            _validate_query(dict(last, **{name: value}), schema)


# Short queries a schema passed, as {(id(schema), items): schema}: clients
# send the same few again and again (a scheduler's claims), and the
# schema check was a good part of such a request's CPU. Forgotten all at
# once past _PASSED_MAX. Failures are always checked (their messages).
_PASSED: dict[tuple[int, frozenset[tuple[str, str]]], Mapping[str, Any]] = {}
_PASSED_MAX = 4096
_PASSED_LENGTH = 1024  # characters of names and values at most


def _validate_query(values: dict[str, str], schema: Mapping[str, Any]) -> None:
    key = (id(schema), frozenset(values.items()))
    if _PASSED.get(key) is schema:
        return
    validate(values, schema, prefix=QUERY_PREFIX)
    if sum(len(k) + len(v) for k, v in key[1]) > _PASSED_LENGTH:
        return
    if len(_PASSED) >= _PASSED_MAX:
        _PASSED.clear()
    _PASSED[key] = schema


def render(resp: falcon.Response, body: Any, status: int = 200) -> None:
    """``body``: a JSON-able object, or bytes already encoded as JSON."""
    resp.status = status
    resp.content_type = "application/json"
    resp.data = body if isinstance(body, bytes) else dumps(body)


def dumps(body: Any) -> bytes:
    """``body`` as compact JSON. Integers past 64 bits (a query's amount
    of 2**64 or more, echoed by explain) are written out as they are, by
    the standard library: orjson refuses them, and the contract sets no
    upper bound on a requested amount."""
    try:
        return orjson.dumps(body)
    except TypeError as e:
        if "64-bit" not in str(e):
            raise
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def render_stream(
    resp: falcon.Response, chunks: Iterable[bytes], status: int = 200
) -> None:
    """A JSON body sent piece by piece as ``chunks`` (bytes) are produced;
    the server closes ``chunks`` when the client goes away. Its first
    STREAM_HEAD bytes are produced here, before the answer starts: an error
    until then (a lost database) is an error answer, not a 200 whose body
    breaks off, and a body no longer than that goes out whole, with
    Content-Length."""
    chunks = iter(chunks)
    head: list[bytes] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size >= STREAM_HEAD:
            break
    else:
        render(resp, b"".join(head), status)
        return
    resp.status = status
    resp.content_type = "application/json"
    resp.stream = _continued(head, chunks)


# Bytes of a streamed body produced before the answer starts.
STREAM_HEAD = 256 * 1024


def _continued(head: list[bytes], chunks: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from head
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def no_content(resp: falcon.Response, status: int = 204) -> None:
    resp.status = status
    resp.content_type = None
    resp.data = b""


def link_href(req: falcon.Request, path: str) -> str:
    """A path-only URL for links in bodies, carrying the mount prefix."""
    return req.root_path + path


def set_location(req: falcon.Request, resp: falcon.Response, path: str) -> None:
    resp.set_header("Location", req.prefix + path)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = (
    "",
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
)


def http_date(dt: datetime.datetime) -> str:
    """``dt`` (naive, UTC) as an HTTP date, as ``email.utils`` writes one
    (``usegmt``), in a third of its time."""
    return "%s, %02d %s %04d %02d:%02d:%02d GMT" % (
        _DAYS[dt.weekday()],
        dt.day,
        _MONTHS[dt.month],
        dt.year,
        dt.hour,
        dt.minute,
        dt.second,
    )


# "Now" as an HTTP date, kept for the second it names: (second, text).
_NOW = (0, "")


def http_now() -> str:
    """The current time as an HTTP date: ``http_date`` of now, made once
    a second (the date was a tenth of ``GET /``'s handler)."""
    global _NOW
    second = int(time.time())
    kept = _NOW
    if kept[0] != second:
        kept = _NOW = (
            second,
            http_date(
                datetime.datetime.fromtimestamp(second, datetime.timezone.utc).replace(
                    tzinfo=None
                )
            ),
        )
    return kept[1]


def set_last_modified(
    req: falcon.Request,
    resp: falcon.Response,
    when: datetime.datetime | None,
    always: bool = False,
) -> None:
    """``last-modified``/``cache-control`` from 1.15 (doc/api.md "Caching
    headers").

    ``when`` None omits last-modified (cache-control is still sent) unless
    ``always`` asks for "now" instead.
    """
    for name, value in caching_headers(req.context.version, when, always):
        resp.set_header(name, value)


def caching_headers(
    version: versions.Version, when: datetime.datetime | None, always: bool = False
) -> list[tuple[str, str]]:
    """``set_last_modified``'s headers at ``version``, named as falcon
    writes them (also for an answer made without falcon: ``api/rootdoc``)."""
    if version < versions.LAST_MODIFIED:
        return []
    if when is not None:
        return [("cache-control", "no-cache"), ("last-modified", http_date(when))]
    if always:
        return [("cache-control", "no-cache"), ("last-modified", http_now())]
    return [("cache-control", "no-cache")]


def last_modified_of(
    rows: Iterable[Mapping[str, Any]],
) -> datetime.datetime | None:
    """Max of updated_at-or-created_at over rows (None if no rows)."""
    times = [r["updated_at"] or r["created_at"] for r in rows]
    times = [t for t in times if t is not None]
    return max(times) if times else None
