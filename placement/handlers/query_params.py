"""Value grammars shared by query strings (doc/api.md "Query values").

Used by ``GET /resource_providers`` and ``GET /allocation_candidates``.
Every function raises ``placement.web.errors.BadRequest`` with the
upstream's message on malformed input; name lookups (unknown classes,
traits, aggregates) are the caller's business.

``parse_resources(value) -> dict[str, int]``
    ``RC:AMOUNT[,RC:AMOUNT...]``; a repeated class keeps the last amount.

``parse_required(values, version, name="required") -> RequiredTraits``
    ``values``: every occurrence of the parameter, in query order. Before
    ANY_TRAITS only the last occurrence counts. ``!TRAIT`` (forbidden)
    needs FORBIDDEN_TRAITS, ``in:T1,T2`` (any of) ANY_TRAITS. ``name``
    ("required", "required1", ...) is the parameter named in the messages.

``parse_member_of(values, version, name="member_of") -> MemberOf``
    ``values``: every occurrence, in query order; all are ANDed from
    MULTIPLE_MEMBER_OF, more than one before it is a 400. ``!U`` /
    ``!in:U1,U2`` need FORBIDDEN_AGGREGATES (names of placement.versions;
    the results are placement.objects.constraints types).
    ``name`` ("member_of", "member_of1", ...) is named in the
    "Multiple ... parameters" message.
"""

from oslo_utils import uuidutils

from placement import versions
from placement.objects import constraints
from placement.web import errors

# The 400 for a well-formed ``resources`` naming a class that does not
# exist (the lookup's own message follows).
UNKNOWN_RESOURCE_CLASS = "Invalid resource class in resources parameter: %s"
_RESOURCES_FORM = (
    "Badly formed resources parameter. Expected resources "
    "query string parameter in form: "
    "?resources=VCPU:2,MEMORY_MB:1024. Got: %s."
)
_REQUIRED_FORM = (
    "Invalid query string parameters: Expected '%s' parameter value of the form: %s. "
)
# The example form the messages show: with a forbidden trait once allowed.
_REQUIRED_EXAMPLE = versions.Table(
    (None, "HW_CPU_X86_VMX,CUSTOM_MAGIC"),
    (versions.FORBIDDEN_TRAITS, "HW_CPU_X86_VMX,!CUSTOM_MAGIC"),
)
_ANY_OF_FORMAT = "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC'"


def parse_resources(value):
    if value.strip() == "":
        raise errors.BadRequest(_RESOURCES_FORM % "empty string")
    amounts = {}
    for item in value.split(","):
        parts = item.split(":")
        if len(parts) != 2:
            raise errors.BadRequest(_RESOURCES_FORM % item)
        rc, amount = parts
        try:
            amount = int(amount)
        except ValueError:
            raise errors.BadRequest(
                "Requested resource %s expected positive integer amount. "
                "Got: %s." % (rc, amount)
            )
        if amount < 1:
            raise errors.BadRequest(
                "Requested resource %s requires amount >= 1. Got: %d." % (rc, amount)
            )
        amounts[rc] = amount
    return amounts


def parse_required(values, version, name="required"):
    if version < versions.ANY_TRAITS:
        values = list(values)[-1:]
    any_of, forbidden = [], set()
    for value in values:
        value_any_of, value_forbidden = _parse_required_value(value, version, name)
        any_of.extend(value_any_of)
        forbidden |= value_forbidden
    return constraints.RequiredTraits(tuple(any_of), frozenset(forbidden))


def _parse_required_value(value, version, name):
    form = _REQUIRED_FORM % (name, _REQUIRED_EXAMPLE(version))
    if value.startswith("in:"):
        if version < versions.ANY_TRAITS:
            raise errors.BadRequest(
                "Invalid query string parameters: %s only supported since "
                "microversion %s. Got: %s"
                % (_ANY_OF_FORMAT, versions.ANY_TRAITS, value)
            )
        traits = [item.strip() for item in value[3:].split(",")]
        if not all(traits):
            raise errors.BadRequest(form + "Got an empty trait in: %s" % value)
        if any(t.startswith("!") for t in traits):
            raise errors.BadRequest(
                form
                + "%s does not support forbidden traits. Got: %s"
                % (_ANY_OF_FORMAT, value)
            )
        return [frozenset(traits)], set()
    items = [item.strip() for item in value.split(",")]
    # "!" alone names no trait: as empty as an empty item.
    if not all(item.lstrip("!") for item in items):
        raise errors.BadRequest(form + "Got an empty trait in: %s" % value)
    negated = [item for item in items if item.startswith("!")]
    if negated and version < versions.FORBIDDEN_TRAITS:
        raise errors.BadRequest(form + "Got: %s" % value)
    required = [frozenset([item]) for item in items if not item.startswith("!")]
    return required, {item.lstrip("!") for item in negated}


def parse_member_of(values, version, name="member_of"):
    values = list(values)
    if len(values) > 1 and version < versions.MULTIPLE_MEMBER_OF:
        raise errors.BadRequest("Multiple %s parameters are not supported" % name)
    any_of, forbidden = [], set()
    for value in values:
        negate = value.startswith("!")
        if negate and version < versions.FORBIDDEN_AGGREGATES:
            raise errors.BadRequest(
                "Forbidden member_of parameters are not supported in the "
                "specified microversion"
            )
        aggregates = _parse_member_of_value(value)
        if negate:
            forbidden |= aggregates
        else:
            any_of.append(aggregates)
    return constraints.MemberOf(tuple(any_of), frozenset(forbidden))


def _parse_member_of_value(value):
    body = value[1:] if value.startswith("!") else value
    if body.startswith("in:"):
        items = body[3:].split(",")
    elif "," in value:
        raise errors.BadRequest(
            "Multiple values for 'member_of' must be prefixed with the 'in:' "
            "or '!in:' keyword using the valid microversion. Got: %s" % value
        )
    else:
        items = [body]
    for item in items:
        if not uuidutils.is_uuid_like(item):
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'member_of' "
                "parameter to contain valid UUID(s). Got: %s" % item
            )
    return frozenset(items)
