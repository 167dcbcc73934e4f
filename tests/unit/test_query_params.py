"""The shared query-string value grammars (doc/api.md "Query values")."""

import pytest

from placement.handlers import query_params as qp
from placement.versions import Version
from placement.web import errors

AGG1 = "5e0b2c3a-6e0e-4a53-9f4f-58f4a1a0e6a1"
AGG2 = "9d8f8b4e-0c07-4f0a-8d0c-3c3b9a7d2f10"
V = Version.parse


def bad(fn, *args, **kw):
    with pytest.raises(errors.BadRequest) as info:
        fn(*args, **kw)
    return info.value.message


# resources


def test_resources_parsed():
    assert qp.parse_resources("VCPU:2,MEMORY_MB:1024") == {"VCPU": 2, "MEMORY_MB": 1024}


def test_resources_repeated_class_keeps_last():
    assert qp.parse_resources("VCPU:2,VCPU:3") == {"VCPU": 3}


@pytest.mark.parametrize("value", ["", "   "])
def test_resources_empty(value):
    assert bad(qp.parse_resources, value).endswith("Got: empty string.")


@pytest.mark.parametrize(
    "value, item",
    [
        ("VCPU", "VCPU"),
        ("VCPU:1:2", "VCPU:1:2"),
        ("VCPU:1,", ""),
        ("VCPU:1,DISK_GB", "DISK_GB"),
    ],
)
def test_resources_badly_formed(value, item):
    assert bad(qp.parse_resources, value) == (
        "Badly formed resources parameter. Expected resources query string "
        "parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: %s." % item
    )


def test_resources_amount_not_int():
    assert bad(qp.parse_resources, "VCPU:x") == (
        "Requested resource VCPU expected positive integer amount. Got: x."
    )


@pytest.mark.parametrize("amount", ["0", "-1"])
def test_resources_amount_below_one(amount):
    assert bad(qp.parse_resources, "VCPU:" + amount) == (
        "Requested resource VCPU requires amount >= 1. Got: %s." % amount
    )


# required


def test_required_plain_traits_are_singletons():
    got = qp.parse_required(["A, B"], V("1.18"))
    assert got.any_of == (frozenset({"A"}), frozenset({"B"}))
    assert got.forbidden == frozenset()
    assert got.names == {"A", "B"}


def test_required_only_last_occurrence_below_139():
    got = qp.parse_required(["A", "in:bad", "B"], V("1.38"))
    assert got.any_of == (frozenset({"B"}),)


def test_required_occurrences_anded_from_139():
    got = qp.parse_required(["A", "in:B,C", "!D"], V("1.39"))
    assert got.any_of == (frozenset({"A"}), frozenset({"B", "C"}))
    assert got.forbidden == frozenset({"D"})


def test_required_forbidden_collapses_bangs():
    got = qp.parse_required(["!!A,B"], V("1.22"))
    assert got.forbidden == frozenset({"A"})
    assert got.any_of == (frozenset({"B"}),)


def test_required_empty_result_is_falsy():
    assert not qp.parse_required([], V("1.39"))
    assert qp.parse_required(["!A"], V("1.39"))


def test_required_forbidden_below_122():
    assert bad(qp.parse_required, ["A,!B"], V("1.21")) == (
        "Invalid query string parameters: Expected 'required' parameter "
        "value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: A,!B"
    )


@pytest.mark.parametrize("value", ["A,,B", "", "A,", "!", "in:A,,B"])
def test_required_empty_trait(value):
    assert bad(qp.parse_required, [value], V("1.39")).endswith(
        "Got an empty trait in: %s" % value
    )


def test_required_name_in_message():
    assert "Expected 'required1' parameter" in bad(
        qp.parse_required, ["!A"], V("1.21"), name="required1"
    )


def test_required_any_of_below_139():
    assert bad(qp.parse_required, ["in:A,B"], V("1.38")) == (
        "Invalid query string parameters: The format "
        "'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion "
        "1.39. Got: in:A,B"
    )


def test_required_any_of_rejects_forbidden():
    assert "does not support forbidden traits" in bad(
        qp.parse_required, ["in:A,!B"], V("1.39")
    )


# member_of


def test_member_of_single_and_in():
    got = qp.parse_member_of([AGG1, "in:%s,%s" % (AGG1, AGG2)], V("1.24"))
    assert got.any_of == (frozenset({AGG1}), frozenset({AGG1, AGG2}))
    assert got.forbidden == frozenset()


def test_member_of_forbidden_forms():
    got = qp.parse_member_of(["!" + AGG1, "!in:%s" % AGG2], V("1.32"))
    assert got.any_of == ()
    assert got.forbidden == frozenset({AGG1, AGG2})


def test_member_of_uuid_like_forms_accepted():
    dashless = AGG1.replace("-", "")
    got = qp.parse_member_of(
        ["in:%s,{%s},urn:uuid:%s" % (dashless, AGG2, AGG2.upper())], V("1.3")
    )
    assert len(got.any_of[0]) == 3


def test_member_of_repeated_below_124():
    assert bad(qp.parse_member_of, [AGG1, AGG2], V("1.23")) == (
        "Multiple member_of parameters are not supported"
    )
    assert bad(qp.parse_member_of, [AGG1, AGG2], V("1.23"), name="member_of2") == (
        "Multiple member_of2 parameters are not supported"
    )


@pytest.mark.parametrize("value", ["!" + AGG1, "!in:" + AGG1])
def test_member_of_forbidden_below_132(value):
    assert bad(qp.parse_member_of, [value], V("1.31")) == (
        "Forbidden member_of parameters are not supported in the specified microversion"
    )


def test_member_of_comma_without_in():
    value = "%s,%s" % (AGG1, AGG2)
    assert bad(qp.parse_member_of, [value], V("1.39")) == (
        "Multiple values for 'member_of' must be prefixed with the 'in:' or "
        "'!in:' keyword using the valid microversion. Got: %s" % value
    )


@pytest.mark.parametrize(
    "value, item",
    [
        ("not-a-uuid", "not-a-uuid"),
        ("in:%s,nope" % AGG1, "nope"),
        ("in:!" + AGG1, "!" + AGG1),
        ("in:", ""),
        ("!!" + AGG1, "!" + AGG1),
    ],
)
def test_member_of_not_uuid_like(value, item):
    assert bad(qp.parse_member_of, [value], V("1.39")) == (
        "Invalid query string parameters: Expected 'member_of' parameter to "
        "contain valid UUID(s). Got: %s" % item
    )


# the schema check of a query string


def test_a_query_a_schema_passed_is_not_checked_again(monkeypatch):
    """A short query string a schema passed is not checked again (a
    scheduler sends the same ones over and over); one it failed is, each
    time, with the same message."""
    from placement.schemas import allocation_candidate as schema
    from placement.web import request

    checked = []
    validate = request.validate
    monkeypatch.setattr(
        request, "validate", lambda *a, **kw: checked.append(a) or validate(*a, **kw)
    )
    monkeypatch.setattr(request, "_PASSED", {})
    version = V("1.38")
    pairs = [("resources", "VCPU:8"), ("limit", "5")]
    for _ in range(3):
        request.validate_query(pairs, schema.QUERY(version))
    assert len(checked) == 1
    request.validate_query(pairs, schema.QUERY(V("1.21")))  # another schema
    assert len(checked) == 2
    wrong = [("resources", "VCPU:8"), ("limit", "five")]
    first = bad(request.validate_query, wrong, schema.QUERY(version))
    assert bad(request.validate_query, wrong, schema.QUERY(version)) == first
    assert len(checked) == 4
    long = [("resources", "VCPU:8"), ("required", "CUSTOM_" + "X" * 2000)]
    for _ in range(2):
        request.validate_query(long, schema.QUERY(version))
    assert len(checked) == 6
