"""Query-string schema of GET /allocation_candidates, one per microversion.

Request-wide names are ``properties``. From 1.25 the group names
(``resources``, ``required``, ``member_of``, later ``in_tree``, each with
an optional suffix) are ``patternProperties`` and ``additionalProperties``
is false, so an unknown name fails with jsonschema's "'<name>' does not
match any of the regexes: ..." (below 1.25: "Additional properties are
not allowed ...").
"""

import copy
import re

from placement import versions

STRING = {"type": "string"}

GROUP_PARAMS = ("resources", "required", "member_of", "in_tree")
# Group suffixes: 1.25-1.32 a positive integer, 1.33+ 1-64 name characters.
SUFFIX_1_25 = "[1-9][0-9]*"
SUFFIX_1_33 = "[a-zA-Z0-9_-]{1,64}"

LIMIT = {
    # Query values are strings; an integer is accepted as well.
    "type": ["integer", "string"],
    "pattern": "^[1-9][0-9]*$",
    "minimum": 1,
    "minLength": 1,
}
GROUP_POLICY = {"type": "string", "enum": ["none", "isolate"]}


def _group_patterns(params, suffix):
    return {"^%s(%s)?$" % (param, suffix): STRING for param in params}


def _evolve(schema, properties=None, pattern_properties=None):
    schema = copy.deepcopy(schema)
    schema["properties"].update(properties or {})
    if pattern_properties is not None:
        schema["patternProperties"] = pattern_properties
    return schema


QUERY_1_10 = {
    "type": "object",
    "properties": {"resources": STRING},
    "required": ["resources"],
    "additionalProperties": False,
}
QUERY_1_16 = _evolve(QUERY_1_10, {"limit": LIMIT})
QUERY_1_17 = _evolve(QUERY_1_16, {"required": STRING})
QUERY_1_21 = _evolve(QUERY_1_17, {"member_of": STRING})
QUERY_1_25 = {
    "type": "object",
    "properties": {"limit": LIMIT, "group_policy": GROUP_POLICY},
    "patternProperties": _group_patterns(GROUP_PARAMS[:3], SUFFIX_1_25),
    "additionalProperties": False,
}
QUERY_1_31 = _evolve(
    QUERY_1_25, pattern_properties=_group_patterns(GROUP_PARAMS, SUFFIX_1_25)
)
QUERY_1_33 = _evolve(
    QUERY_1_31, pattern_properties=_group_patterns(GROUP_PARAMS, SUFFIX_1_33)
)
QUERY_1_35 = _evolve(QUERY_1_33, {"root_required": STRING})
QUERY_1_36 = _evolve(QUERY_1_35, {"same_subtree": STRING})

QUERY = versions.Table(
    (versions.ALLOCATION_CANDIDATES, QUERY_1_10),
    (versions.CANDIDATE_LIMIT, QUERY_1_16),
    (versions.CANDIDATE_TRAITS, QUERY_1_17),
    (versions.CANDIDATE_MEMBER_OF, QUERY_1_21),
    (versions.GRANULAR_GROUPS, QUERY_1_25),
    (versions.CANDIDATE_IN_TREE, QUERY_1_31),
    (versions.NAMED_SUFFIXES, QUERY_1_33),
    (versions.ROOT_REQUIRED, QUERY_1_35),
    (versions.SAME_SUBTREE, QUERY_1_36),
)

# Validated on every occurrence, not only the one the schema sees: the
# handler uses their first occurrence.
FIRST_WINS = ("limit", "group_policy")

_GROUP_NAME = re.compile(r"^(resources|required|member_of|in_tree)(.*)$", re.DOTALL)


def split_group_name(name):
    """(param, suffix) for a group parameter name, else None."""
    match = _GROUP_NAME.match(name)
    return match.groups() if match else None
