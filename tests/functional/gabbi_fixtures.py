"""Fixtures a gabbi YAML file can name in its ``fixtures:`` list.

The database and app are set up by the plugin for every file; these add
configuration for files that need it.
"""

from gabbi import fixture

from placement import policy
from tests import fixtures


class _ConfigFixture(fixture.GabbiFixture):
    overrides = {}

    def start_fixture(self):
        self.conf = fixtures.configure(**self.overrides)

    def stop_fixture(self):
        for key in self.overrides:
            group, _, name = key.rpartition(".")
            self.conf.clear_override(name, group=group or None)
            # oslo.config keeps reporting the cleared override as the
            # option's location; the candidate handler reads it.
            self.conf._get_opt_info(name, group or None).pop("location", None)


class _PolicyFixture(_ConfigFixture):
    """A config override that the policy engine must be rebuilt for."""

    def start_fixture(self):
        super().start_fixture()
        policy.reset()

    def stop_fixture(self):
        super().stop_fixture()
        policy.reset()


class LegacyPolicyDefaults(_PolicyFixture):
    overrides = {"oslo_policy.enforce_new_defaults": False}


class NoScopeEnforcement(_PolicyFixture):
    overrides = {"oslo_policy.enforce_scope": False}


# Allocation candidate generation ([placement] options, doc/api.md "Order,
# cap and limit").


class MaxAllocationCandidates(_ConfigFixture):
    """Depth-first generation capped at two candidates."""

    overrides = {"placement.max_allocation_candidates": 2}


class BreadthFirstCandidates(_ConfigFixture):
    """Round-robin over roots, capped at three candidates."""

    overrides = {
        "placement.allocation_candidates_generation_strategy": "breadth-first",
        "placement.max_allocation_candidates": 3,
    }


class DepthFirstCandidates(_ConfigFixture):
    """depth-first (not the default depth-first-unless-limit): a limit
    takes one root's requests first."""

    overrides = {"placement.allocation_candidates_generation_strategy": "depth-first"}


class RandomizeCandidates(_ConfigFixture):
    overrides = {"placement.randomize_allocation_candidates": True}
