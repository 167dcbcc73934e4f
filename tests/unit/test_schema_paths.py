"""Every schema in placement/schemas/, at every microversion, with one
invalid value per validator: the 400 text names that validator at the
natural schema path (no anyOf/oneOf detours) and the instance path.

A valid document is generated for each schema, then each validator of
each subschema is broken in turn at the matching place of the document.
"""

import importlib
import pkgutil
import re

import pytest

from placement import schemas
from placement import versions
from placement.web import errors
from placement.web import request

UUID = "3e6b2a38-0000-4000-8000-00000000000a"
# Values tried, in order, for strings and object keys that need a pattern.
STRING_CANDIDATES = ["VCPU", "CUSTOM_A", "1", UUID]
STRING_CANDIDATES += ["resources", "required", "member_of", "in_tree"]
BOGUS_KEY = "!bogus"
# A value of each JSON type, to break a "type".
OF_TYPE = {
    "array": [],
    "object": {},
    "string": "s",
    "number": 1.5,
    "integer": 1,
    "boolean": True,
    "null": None,
}


def _all_schemas():
    """(name, schema) for every schema dict and every row of every
    versions.Table in the package, each distinct schema once."""
    seen, found = set(), []

    def add(name, value):
        if isinstance(value, dict) and value.get("type") in ("object", "array"):
            if id(value) in seen:
                return
            seen.add(id(value))
            found.append((name, value))

    for info in pkgutil.iter_modules(schemas.__path__):
        module = importlib.import_module("placement.schemas." + info.name)
        for attr, value in sorted(vars(module).items()):
            if attr.startswith("__"):
                continue
            name = "%s.%s" % (info.name, attr)
            if isinstance(value, versions.Table):
                for minor in range(versions.MAX.minor + 1):
                    try:
                        row = value(versions.Version(1, minor))
                    except LookupError:
                        continue
                    add("%s@1.%d" % (name, minor), row)
            else:
                add(name, value)
    return found


def _types(schema):
    types = schema.get("type", [])
    return [types] if isinstance(types, str) else list(types)


def _matching(pattern):
    for candidate in STRING_CANDIDATES:
        if re.search(pattern, candidate):
            return candidate
    raise AssertionError("no candidate string matches %r: add one" % pattern)


def _valid(schema):
    """A document using every property of ``schema``, valid against it."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = [t for t in _types(schema) if t != "null"][0]
    if kind == "object":
        doc = {key: _valid(sub) for key, sub in schema.get("properties", {}).items()}
        for pattern, sub in schema.get("patternProperties", {}).items():
            doc[_matching(pattern)] = _valid(sub)
        return doc
    if kind == "array":
        return [_valid(schema["items"])]
    if kind == "string":
        if "pattern" in schema:
            return _matching(schema["pattern"])
        return UUID if schema.get("format") == "uuid" else "a"
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    return OF_TYPE[kind]


def _invalid_values(schema, validator, value):
    """Values breaking ``validator`` (none for a lower bound of 0)."""
    if (
        validator in ("minLength", "minItems", "minProperties")
        and not schema[validator]
    ):
        return
    if validator == "type":
        types = _types(schema)
        wrong = [v for t, v in OF_TYPE.items() if t not in types]
        if "number" in types:
            wrong = [v for v in wrong if not isinstance(v, (int, float))]
        yield wrong[0]
    elif validator == "minimum":
        yield schema["minimum"] - 1
    elif validator == "maximum":
        yield schema["maximum"] * 2
    elif validator == "minLength":
        yield ""
    elif validator == "maxLength":
        yield value + "A" * schema["maxLength"]
    elif validator == "pattern":
        # "!" fits no name pattern; "x " breaks the ids' no-trailing-space.
        yield next(v for v in ("!", "x ") if not re.search(schema["pattern"], v))
    elif validator == "format":
        yield "not-a-uuid"
    elif validator == "enum":
        yield "bogus"
    elif validator == "minItems":
        yield []
    elif validator == "uniqueItems":
        yield value + value
    elif validator == "minProperties":
        yield {}
    elif validator == "additionalProperties":
        yield dict(value, **{BOGUS_KEY: 1})
    elif validator == "required":
        for key in schema["required"]:
            yield {k: v for k, v in value.items() if k != key}
    else:
        raise AssertionError("no invalid value for %r: add one" % validator)


# Keywords that only describe others' subschemas.
_STRUCTURE = ("properties", "patternProperties", "items")


def _cases(schema, doc, schema_path=(), instance_path=()):
    """(schema path, instance path, validator, broken document) for each
    validator of ``schema`` and of its subschemas."""
    value = _get(doc, instance_path)
    for validator in schema:
        if validator in _STRUCTURE:
            continue
        if validator == "additionalProperties" and schema[validator] is not False:
            continue
        for bad in _invalid_values(schema, validator, value):
            yield schema_path, instance_path, validator, _set(doc, instance_path, bad)
    for key, sub in schema.get("properties", {}).items():
        yield from _cases(
            sub, doc, schema_path + ("properties", key), instance_path + (key,)
        )
    for pattern, sub in schema.get("patternProperties", {}).items():
        yield from _cases(
            sub,
            doc,
            schema_path + ("patternProperties", pattern),
            instance_path + (_matching(pattern),),
        )
    if "items" in schema:
        yield from _cases(
            schema["items"], doc, schema_path + ("items",), instance_path + (0,)
        )


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _set(doc, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = list(doc) if isinstance(doc, list) else dict(doc)
    copy[head] = _set(doc[head], rest, value)
    return copy


def _index(word, path):
    return word + "".join("[%r]" % key for key in path)


SCHEMAS = _all_schemas()


def test_every_schema_module_is_walked():
    modules = {name.split(".")[0] for name, _ in SCHEMAS}
    # uuids holds patterns the others use, no schema of its own.
    assert modules | {"uuids"} == {
        info.name for info in pkgutil.iter_modules(schemas.__path__)
    }


@pytest.mark.parametrize("name,schema", SCHEMAS, ids=[name for name, _ in SCHEMAS])
def test_failure_names_the_natural_path(name, schema):
    doc = _valid(schema)
    request.validate(doc, schema)  # the generated document itself is valid
    cases = list(_cases(schema, doc))
    assert cases
    for schema_path, instance_path, validator, bad in cases:
        with pytest.raises(errors.BadRequest) as raised:
            request.validate(bad, schema)
        text = raised.value.message
        assert "\n" not in text
        sub = _get(schema, schema_path)
        # The broken value may break a sibling validator listed first
        # (e.g. "" fails a pattern before its minLength): either is fine,
        # the paths must be the natural ones.
        broken = {
            v
            for v in sub
            if v not in _STRUCTURE and _fails(_get(bad, instance_path), sub, v)
        } | {validator}
        printed = re.search(r"Failed validating '(\w+)' in (\S+):", text)
        assert printed, text
        assert printed.group(1) in broken, (validator, text)
        assert printed.group(2) == _index("schema", schema_path), text
        assert " On %s: " % _index("instance", instance_path) in text, text


def _fails(value, schema, validator):
    part = {validator: schema[validator]}
    if validator == "additionalProperties":
        part.update(
            {k: schema[k] for k in ("properties", "patternProperties") if k in schema}
        )
    try:
        request.validate(value, part)
    except errors.BadRequest:
        return True
    return False
