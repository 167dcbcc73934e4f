"""GET /allocation_candidates/explain against the real answer, over
random layouts, flat and nested (children with traits and aggregates of
their own), and random requests (hypothesis): ``candidates`` is always the
length of GET /allocation_candidates' ``allocation_requests``; an empty
answer always has a reason naming a filter whose count is zero, and that
filter is the cause: a filter the query can drop (traits, member_of,
root_required, same_subtree, isolate) changes the answer when dropped,
and when the reason is the amounts, dropping every such filter still
finds nothing. When no tree has a provider for every group, the filter
the explanation says emptied that set is the cause in the same way."""

import os
import re
import urllib.parse
import uuid

import hypothesis
import pytest
from hypothesis import strategies as st

from tests import fixtures
from tests import helpers
from tests import wsgi_client

EXAMPLES = int(os.environ.get("PLACEMENT_EXPLAIN_EXAMPLES", "25"))
HEADERS = {
    "x-auth-token": "admin",
    "openstack-api-version": "placement 1.39",
    "content-type": "application/json",
}
TRAITS = ["CUSTOM_A", "CUSTOM_B"]


def _call(app, method, path, body=None, query=""):
    r = wsgi_client.call(app, path, method, body, query=query, headers=HEADERS)
    assert r.status < 300, (method, path, query, r.status, r.body)
    return r.json() if r.body else None


provider = st.fixed_dictionaries(
    {
        "vcpu": st.integers(0, 4),
        "memory": st.sampled_from([0, 0, 1024]),
        "traits": st.lists(st.sampled_from(TRAITS), unique=True, max_size=2),
        "agg": st.booleans(),
        "children": st.integers(0, 2),
        "child_traits": st.lists(st.sampled_from(TRAITS), unique=True, max_size=2),
        "child_agg": st.booleans(),
    }
)
layout = st.lists(provider, min_size=1, max_size=3)


@st.composite
def queries(draw):
    pairs = []
    if draw(st.booleans()):
        pairs.append(("resources", "VCPU:%d" % draw(st.integers(1, 5))))
        required = draw(
            st.sampled_from(["", "CUSTOM_A", "!CUSTOM_B", "in:CUSTOM_A,CUSTOM_B"])
        )
        if required:
            pairs.append(("required", required))
    else:
        pairs.append(("resources1", "VCPU:%d" % draw(st.integers(1, 3))))
        pairs.append(("resources2", draw(st.sampled_from(["VCPU:1", "MEMORY_MB:512"]))))
        pairs.append(("group_policy", draw(st.sampled_from(["none", "isolate"]))))
        if draw(st.booleans()):
            pairs.append(("same_subtree", "1,2"))
    if draw(st.booleans()):
        granular = pairs[0][0] == "resources1"
        pairs.append(("member_of1" if granular else "member_of", "AGG"))
    if draw(st.booleans()):
        pairs.append(("root_required", draw(st.sampled_from(TRAITS))))
    return pairs


def _build(app, providers_):
    agg = str(uuid.uuid4())
    for i, spec in enumerate(providers_):
        root = _add(app, "cn%d" % i, None, spec, agg)
        for j in range(spec["children"]):
            child = dict(spec, traits=spec["child_traits"], agg=spec["child_agg"])
            _add(app, "cn%d-%d" % (i, j), root, child, agg)
    return agg


def _add(app, name, parent, spec, agg):
    rp = str(uuid.uuid4())
    body = {"name": name, "uuid": rp}
    if parent:
        body["parent_provider_uuid"] = parent
    generation = _call(app, "POST", "/resource_providers", body)["generation"]
    inventories = {}
    if spec["vcpu"]:
        inventories["VCPU"] = {"total": spec["vcpu"]}
    if spec["memory"]:
        inventories["MEMORY_MB"] = {"total": spec["memory"]}
    if inventories:
        generation = _call(
            app,
            "PUT",
            "/resource_providers/%s/inventories" % rp,
            {"resource_provider_generation": generation, "inventories": inventories},
        )["resource_provider_generation"]
    if spec["traits"]:
        generation = _call(
            app,
            "PUT",
            "/resource_providers/%s/traits" % rp,
            {"resource_provider_generation": generation, "traits": spec["traits"]},
        )["resource_provider_generation"]
    if agg and spec["agg"]:
        _call(
            app,
            "PUT",
            "/resource_providers/%s/aggregates" % rp,
            {"resource_provider_generation": generation, "aggregates": [agg]},
        )
    return rp


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_explain_agrees_with_the_real_answer(backend):
    fixtures.require_backend(backend)

    @helpers.bounded_examples(EXAMPLES)
    @hypothesis.given(layout, queries())
    def check(providers_, pairs):
        with fixtures.app(backend) as (app, _db):
            _call(app, "PUT", "/traits/CUSTOM_A")
            _call(app, "PUT", "/traits/CUSTOM_B")
            agg = _build(app, providers_)
            query = urllib.parse.urlencode(
                [(k, agg if v == "AGG" else v) for k, v in pairs]
            )
            real = _call(app, "GET", "/allocation_candidates", query=query)
            explained = _call(app, "GET", "/allocation_candidates/explain", query=query)
        assert explained["candidates"] == len(real["allocation_requests"])
        if explained["candidates"]:
            assert "candidates found" in explained["reason"]
            return
        zero = [
            step["filter"]
            for funnel in [*explained["groups"].values(), explained["request"]]
            for step in funnel
            if not step.get("providers", step.get("trees"))
        ]
        assert zero, explained
        named = [f for f in zero if f in explained["reason"]]
        assert named, (explained["reason"], zero)
        suffix, name = _cause(explained)
        with fixtures.app(backend) as (app, _db):
            _call(app, "PUT", "/traits/CUSTOM_A")
            _call(app, "PUT", "/traits/CUSTOM_B")
            agg = _build(app, providers_)
            if name in AMOUNTS:
                # The amounts alone leave nothing.
                assert not _answer(app, _dropped(pairs, DROPPABLE, None), agg), (
                    explained["reason"]
                )
            elif name in DROPPABLE:
                less = _dropped(pairs, {name}, suffix)
                assert less != pairs, (explained["reason"], pairs)
                again = _call(
                    app,
                    "GET",
                    "/allocation_candidates/explain",
                    query=_query(less, agg),
                )
                assert again["candidates"] or _named(again["reason"]) != (suffix, name)

    check()


# Filters a query can drop, and what the reason names when the amounts
# (inventory, capacity, their sums in one tree) are the cause.
DROPPABLE = {
    "required",
    "forbidden",
    "any_of",
    "member_of",
    "root_required",
    "same_subtree",
    "isolate",
}
AMOUNTS = {"resources", "capacity", "fit", "groups"}


def _cause(explained):
    """(group suffix or None, filter) the explanation blames: the filter
    that emptied ``groups`` when it names one, else the reason's first."""
    (groups,) = [s for s in explained["request"] if s["filter"] == "groups"] or [{}]
    emptied_by = groups.get("emptied_by")
    if emptied_by and explained["reason"].startswith("groups:"):
        return emptied_by["group"], emptied_by["filter"].split(":")[0]
    return _named(explained["reason"])


def _named(reason):
    """(group suffix or None, filter) the reason names first."""
    found = re.match(r"group '([^']*)', ([a-z_]+)", reason)
    if found:
        return found.group(1), found.group(2)
    return None, re.match(r"([a-z_]+)", reason).group(1)


def _dropped(pairs, names, suffix):
    """``pairs`` without the filters ``names`` (of group ``suffix``; None:
    of any group): group_policy=isolate becomes none."""
    traits = {"required", "forbidden", "any_of"}
    out = []
    for key, value in pairs:
        group = re.sub(r"^(required|member_of)", "", key)
        mine = suffix is None or group == suffix
        if key.startswith("required") and names & traits and mine:
            continue
        if key.startswith("member_of") and "member_of" in names and mine:
            continue
        if key in names:
            continue
        if key == "group_policy" and "isolate" in names:
            value = "none"
        out.append((key, value))
    return out


def _query(pairs, agg):
    return urllib.parse.urlencode([(k, agg if v == "AGG" else v) for k, v in pairs])


def _answer(app, pairs, agg):
    found = _call(app, "GET", "/allocation_candidates", query=_query(pairs, agg))
    return found["allocation_requests"]
