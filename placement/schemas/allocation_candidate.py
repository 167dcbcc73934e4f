"""Query-string schema of GET /allocation_candidates, per microversion.

The schema is built for the names present in the query: plain names known
at the version, plus suffixed group names whose suffix the version allows.
Anything else is left out of ``properties`` so jsonschema reports it as
"Additional properties are not allowed ('<name>' was unexpected)".
"""
import re

from placement.api import microversion

STRING = {"type": "string"}

# name -> (first version, value schema)
PLAIN = {
    "resources": ("1.10", STRING),
    "limit": ("1.16", {"type": "string", "pattern": "^[1-9][0-9]*$"}),
    "required": ("1.17", STRING),
    "member_of": ("1.21", STRING),
    "group_policy": ("1.25", {"type": "string", "enum": ["none", "isolate"]}),
    "in_tree": ("1.31", STRING),
    "root_required": ("1.35", STRING),
    "same_subtree": ("1.36", STRING),
}

GROUP_PARAMS = ("resources", "required", "member_of", "in_tree")
SUFFIXED_SINCE = {"resources": "1.25", "required": "1.25", "member_of": "1.25",
                  "in_tree": "1.31"}

# Which group suffixes a version accepts.
SUFFIX = microversion.VersionTable(
    ("1.25", re.compile(r"[1-9][0-9]*")),
    ("1.33", re.compile(r"[A-Za-z0-9_-]{1,64}")))

_GROUP_NAME = re.compile(r"^(resources|required|member_of|in_tree)(.*)$",
                         re.DOTALL)


def split_group_name(name):
    """(param, suffix) for a group parameter name, else None."""
    match = _GROUP_NAME.match(name)
    return match.groups() if match else None


def _known(name, version):
    if name in PLAIN:
        return version >= PLAIN[name][0]
    parts = split_group_name(name)
    if not parts or version < SUFFIXED_SINCE[parts[0]]:
        return False
    return SUFFIX(version).fullmatch(parts[1]) is not None


def query_schema(names, version):
    properties = {name: PLAIN[name][1] if name in PLAIN else STRING
                  for name in names if _known(name, version)}
    schema = {"type": "object", "properties": properties,
              "additionalProperties": False}
    if version < "1.25":
        schema["required"] = ["resources"]
    return schema
