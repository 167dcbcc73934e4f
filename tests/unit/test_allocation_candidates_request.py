"""Stage 1: query pairs to a Request, and the structural rules (pure)."""

import pytest

from placement import error_codes
from placement import exception
from placement import versions
from placement.handlers.candidates import query as candidate_query
from placement.web import errors

V = versions.Version.parse


def parse(query, version="1.39"):
    pairs = [tuple(p.split("=", 1)) for p in query.split("&")]
    req = candidate_query.parse_query(pairs, V(version))
    candidate_query.check_structure(req, V(version))
    return req


def test_groups_in_query_order_with_suffixes():
    req = parse(
        "resources_B=VCPU:1&resources=DISK_GB:5&resources_A=VF:1"
        "&group_policy=isolate&group_policy=none&limit=3&limit=9"
    )
    assert [g.suffix for g in req.groups] == ["_B", "", "_A"]
    assert req.groups[1].resources == (("DISK_GB", 5),)
    assert req.group_policy == "isolate" and req.limit == 3
    assert req.isolate


def test_last_resources_wins_and_required_repeats_from_1_39():
    req = parse("resources=VCPU:1&resources=VCPU:2&required=A&required=in:B,C")
    group = req.groups[0]
    assert group.resources == (("VCPU", 2),)
    assert group.any_traits == (frozenset("A"), frozenset("BC"))
    req = parse("resources=VCPU:1&required=A&required=B", "1.38")
    assert req.groups[0].any_traits == (frozenset("B"),)


def test_root_required_and_same_subtree():
    req = parse(
        "resources_A=VCPU:1&required_B=X&group_policy=none"
        "&root_required=R,!F&same_subtree=_A, _B&same_subtree=_A"
    )
    assert req.root_required == {"R"} and req.root_forbidden == {"F"}
    assert req.same_subtree == (("_A", "_B"), ("_A",))


def test_in_tree_is_stripped():
    uuid = "c0000000-0000-4000-8000-000000000001"
    assert parse("resources=VCPU:1&in_tree= %s " % uuid).groups[0].in_tree == uuid


@pytest.mark.parametrize(
    "query,version,code,message",
    [
        (
            "resources=VCPU:1&root_required=A&root_required=B",
            "1.39",
            error_codes.QUERY_DUPLICATE_KEY,
            "may be specified only once",
        ),
        (
            "resources=VCPU:1&root_required=A,!A",
            "1.39",
            error_codes.QUERY_BAD_VALUE,
            "found in root_required: A",
        ),
        (
            "resources_A=VCPU:1&same_subtree=_A,",
            "1.39",
            error_codes.QUERY_BAD_VALUE,
            "Empty string (unsuffixed group)",
        ),
        ("resources=VCPU:1&in_tree=x", "1.39", None, "format of uuid. Got: x"),
    ],
)
def test_value_errors(query, version, code, message):
    with pytest.raises(errors.BadRequest) as e:
        parse(query, version)
    assert message in e.value.message and e.value.code == code


@pytest.mark.parametrize(
    "query,version,code,message",
    [
        (
            "required_A=X&same_subtree=_A",
            "1.39",
            error_codes.QUERY_MISSING_VALUE,
            "at least one resources",
        ),
        (
            "resources_A=VCPU:1&required=X",
            "1.39",
            error_codes.QUERY_BAD_VALUE,
            "bad group(s) - ['']",
        ),
        (
            "resources_A=VCPU:1&same_subtree=_A,_Z",
            "1.39",
            error_codes.QUERY_BAD_VALUE,
            "['_Z'] not found in",
        ),
        (
            "resources=VCPU:1&required1=X",
            "1.35",
            None,
            "orphaned traits keys: required1",
        ),
        (
            "resources=VCPU:1&member_of1=aaaaaaaa-0000-4000-8000-00000000000a",
            "1.35",
            None,
            "orphaned member_of keys: member_of1",
        ),
        (
            "resources=VCPU:1&in_tree1=aaaaaaaa-0000-4000-8000-00000000000a",
            "1.35",
            None,
            "All request groups must specify resources.",
        ),
        ("resources=VCPU:1&required=A,!A", "1.39", None, "traits keys: required: (A)"),
        ("resources1=VCPU:1&resources2=VCPU:1", "1.25", None, "group_policy"),
    ],
)
def test_structural_errors(query, version, code, message):
    with pytest.raises(exception.BadRequest) as e:
        parse(query, version)
    assert message in e.value.message and e.value.code == code


def test_trait_conflict_not_checked_before_1_22():
    # Forbidden traits do not parse before 1.22, so nothing can conflict;
    # a plain repeated trait is fine.
    assert parse("resources=VCPU:1&required=A,A", "1.21").groups[0].required


def test_one_suffixed_group_needs_no_policy():
    assert parse("resources=VCPU:1&resources1=VCPU:1").group_policy is None
