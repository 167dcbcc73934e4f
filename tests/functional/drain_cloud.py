"""A cloud built through the API for the GET /maintenance/drain tests
(tests/functional/test_drain.py, test_drain_rules.py): providers by
name, consumers, plans, and moves applied as real writes."""

import uuid

from tests import wsgi_client

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


class Cloud:
    """Providers by name on one placement app; its consumers belong to
    PROJECT_ID and USER_ID."""

    PROJECT_ID = "p-drain"
    USER_ID = "u-drain"

    def __init__(self, app, db):
        self.app = app
        self.db = db
        self.names: dict[str, str] = {}

    def call(self, path, method="GET", body=None, headers=ADMIN):
        return wsgi_client.call(
            self.app, path, method=method, body=body, headers=headers
        )

    def ok(self, path, method, body, status=200):
        resp = self.call(path, method, body)
        assert resp.status == status, (path, resp.body)
        return resp.json() if resp.body else None

    def provider(self, name, parent=None, inventories=None, traits=(), aggregates=()):
        """A provider (created in call order: root ids follow it); an
        inventory given as a number is its total."""
        rp = str(uuid.uuid4())
        body = {"name": name, "uuid": rp}
        if parent:
            body["parent_provider_uuid"] = self.names[parent]
        generation = self.ok("/resource_providers", "POST", body)["generation"]
        base = "/resource_providers/%s/" % rp
        if inventories:
            generation = self.ok(
                base + "inventories",
                "PUT",
                {
                    "resource_provider_generation": generation,
                    "inventories": {
                        rc: {"total": n} if isinstance(n, int) else n
                        for rc, n in inventories.items()
                    },
                },
            )["resource_provider_generation"]
        for trait in traits:
            self.call("/traits/" + trait, "PUT")
        if traits:
            generation = self.ok(
                base + "traits",
                "PUT",
                {"resource_provider_generation": generation, "traits": list(traits)},
            )["resource_provider_generation"]
        if aggregates:
            self.ok(
                base + "aggregates",
                "PUT",
                {
                    "resource_provider_generation": generation,
                    "aggregates": list(aggregates),
                },
            )
        self.names[name] = rp
        return rp

    def allocate(self, who, allocations):
        """``who`` holds ``allocations`` ({provider name: {class:
        amount}})."""
        self.ok(
            "/allocations/" + who,
            "PUT",
            {
                "allocations": {
                    self.names[name]: {"resources": resources}
                    for name, resources in allocations.items()
                },
                "project_id": self.PROJECT_ID,
                "user_id": self.USER_ID,
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
            status=204,
        )

    def drain_response(self, query, status=200, headers=ADMIN):
        """GET /maintenance/drain?``query``, which must answer ``status``."""
        resp = self.call("/maintenance/drain?" + query, headers=headers)
        assert resp.status == status, (query, resp.body)
        return resp

    def put_move(self, move):
        """One move of a plan as a real write: the planned allocation
        replaces the consumer's, with its generation."""
        return self.call(
            "/allocations/" + move["consumer"],
            "PUT",
            {
                "allocations": move["allocations"],
                "project_id": move["project_id"],
                "user_id": move["user_id"],
                "consumer_generation": move["consumer_generation"],
                "consumer_type": move["consumer_type"],
            },
        )

    def name(self, rp):
        return {u: n for n, u in self.names.items()}[rp]

    def over_capacity(self):
        """(provider, class, used, capacity) of every provider used past
        its capacity, as GET .../usages and .../inventories report them."""
        over = []
        for name, rp in self.names.items():
            base = "/resource_providers/%s/" % rp
            inventories = self.call(base + "inventories").json()["inventories"]
            usages = self.call(base + "usages").json()["usages"]
            for rc, inv in inventories.items():
                capacity = int(
                    (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
                )
                if usages.get(rc, 0) > capacity:
                    over.append((name, rc, usages[rc], capacity))
        return over
