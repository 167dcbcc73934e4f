"""The route table: every path, its methods in ``Allow`` order, and the
handler function serving each."""

import functools
from typing import Any
from typing import Callable

import falcon

from placement.db import retry
from placement.handlers import aggregate
from placement.handlers import allocation
from placement.handlers import audit
from placement.handlers import cloud_view
from placement.handlers import drain
from placement.handlers import inventory
from placement.handlers import reshaper
from placement.handlers import resource_class
from placement.handlers import resource_provider
from placement.handlers import root
from placement.handlers import trait
from placement.handlers import usage
from placement.handlers.candidates import allocation_candidate
from placement.handlers.candidates import allocation_candidate_capacity
from placement.handlers.candidates import allocation_candidate_explain
from placement.web import errors

# (path, [(method, handler), ...]), methods in Allow order.
ROUTES: list[tuple[str, list[tuple[str, Callable[..., Any]]]]] = [
    ("/", [("GET", root.home)]),
    (
        "/resource_classes",
        [
            ("GET", resource_class.list_resource_classes),
            ("POST", resource_class.create_resource_class),
        ],
    ),
    (
        "/resource_classes/{name}",
        [
            ("GET", resource_class.get_resource_class),
            ("PUT", resource_class.update_resource_class),
            ("DELETE", resource_class.delete_resource_class),
        ],
    ),
    (
        "/resource_providers",
        [
            ("GET", resource_provider.list_resource_providers),
            ("POST", resource_provider.create_resource_provider),
        ],
    ),
    (
        "/resource_providers/{uuid}",
        [
            ("GET", resource_provider.get_resource_provider),
            ("DELETE", resource_provider.delete_resource_provider),
            ("PUT", resource_provider.update_resource_provider),
        ],
    ),
    (
        "/resource_providers/{uuid}/inventories",
        [
            ("GET", inventory.get_inventories),
            ("POST", inventory.create_inventory),
            ("PUT", inventory.set_inventories),
            ("DELETE", inventory.delete_inventories),
        ],
    ),
    (
        "/resource_providers/{uuid}/inventories/{resource_class}",
        [
            ("GET", inventory.get_inventory),
            ("PUT", inventory.update_inventory),
            ("DELETE", inventory.delete_inventory),
        ],
    ),
    ("/resource_providers/{uuid}/usages", [("GET", usage.list_usages)]),
    (
        "/resource_providers/{uuid}/aggregates",
        [("GET", aggregate.get_aggregates), ("PUT", aggregate.set_aggregates)],
    ),
    (
        "/resource_providers/{uuid}/allocations",
        [("GET", allocation.list_for_resource_provider)],
    ),
    (
        "/resource_providers/{uuid}/traits",
        [
            ("GET", trait.list_traits_for_resource_provider),
            ("PUT", trait.update_traits_for_resource_provider),
            ("DELETE", trait.delete_traits_for_resource_provider),
        ],
    ),
    ("/allocations", [("POST", allocation.set_allocations)]),
    (
        "/allocations/{consumer_uuid}",
        [
            ("GET", allocation.list_for_consumer),
            ("PUT", allocation.set_allocations_for_consumer),
            ("DELETE", allocation.delete_allocations),
        ],
    ),
    (
        "/allocation_candidates",
        [("GET", allocation_candidate.list_allocation_candidates)],
    ),
    (
        "/allocation_candidates/explain",
        [("GET", allocation_candidate_explain.explain)],
    ),
    (
        "/allocation_candidates/capacity",
        [("GET", allocation_candidate_capacity.capacity)],
    ),
    ("/traits", [("GET", trait.list_traits)]),
    (
        "/traits/{name}",
        [
            ("GET", trait.get_trait),
            ("PUT", trait.put_trait),
            ("DELETE", trait.delete_trait),
        ],
    ),
    ("/usages", [("GET", usage.get_total_usages)]),
    ("/roots", [("GET", cloud_view.list_roots)]),
    ("/reshaper", [("POST", reshaper.reshape)]),
    ("/maintenance/drain", [("GET", drain.drain)]),
    ("/maintenance/audit", [("GET", audit.audit)]),
]


# Methods whose handlers only read: one the database aborted with a
# deadlock is run again whole (``retry.retry_read_on_deadlock``).
READS = frozenset({"GET", "HEAD"})


class Route:
    """A falcon resource for one path: listed methods go to their handlers,
    every other method is a 405 whose ``Allow`` lists the route's methods."""

    def __init__(self, methods):
        self.allowed = [m for m, _ in methods]
        handlers = dict(methods)
        for method in falcon.COMBINED_METHODS:
            handler = handlers.get(method, self._not_allowed)
            setattr(self, "on_" + method.lower(), self._enter(handler, method))

    @staticmethod
    def _enter(handler, method):
        @functools.wraps(handler)
        def responder(req, resp, **params):
            req.context.in_handler = True
            return handler(req, resp, **params)

        if method in READS:
            return retry.retry_read_on_deadlock(responder)
        return responder

    def _not_allowed(self, req, resp, **params):
        raise errors.MethodNotAllowed(req.method, self.allowed)


def add_routes(app: falcon.App) -> None:
    last = len(ROUTES) - 1
    for i, (path, methods) in enumerate(ROUTES):
        # The router compiled with its last route, here (in placement-api's
        # master, before the fork), not by each worker's first request.
        app.add_route(path, Route(methods), compile=i == last)
