"""Fixtures a gabbi YAML file can name in its ``fixtures:`` list.

The database and app are set up by the plugin for every file; these add
configuration for files that need it.
"""

from gabbi import fixture

from tests import fixtures


class _ConfigFixture(fixture.GabbiFixture):
    overrides: dict = {}

    def start_fixture(self):
        self._overrides = fixtures.overrides(**self.overrides)
        self._overrides.__enter__()

    def stop_fixture(self):
        self._overrides.__exit__(None, None, None)


class LegacyPolicyDefaults(_ConfigFixture):
    overrides = {"oslo_policy.enforce_new_defaults": False}


class NoScopeEnforcement(_ConfigFixture):
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


class SmallAnswerBound(_ConfigFixture):
    """Answers hold at most 240 candidates."""

    overrides = {"placement.max_answer_candidates": 240}
