"""Drain plans (GET /maintenance/drain, ``placement-manage drain-plan``;
doc/drain.md): where every consumer of some trees would go if those
trees were emptied, chosen by the allocation candidate engine, and why
the ones that fit nowhere do not. Read-only.

Modules, in the order a plan runs them: ``selection`` (which trees are
drained), ``holdings`` (one read of their consumers' allocations),
``equivalent`` (each consumer's allocation as an allocation candidate
request), ``planner`` (the engine's search over one snapshot, carrying
the plan's own usage forward) and ``reasons`` (explain's reasons, on the
cloud as the plan leaves it).
"""

from placement.objects.drain.planner import STRATEGIES
from placement.objects.drain.planner import Asked
from placement.objects.drain.planner import plan

__all__ = ["STRATEGIES", "Asked", "plan"]
