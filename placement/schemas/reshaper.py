"""Body schema of POST /reshaper (doc/api.md "Reshaper")."""

from placement import versions
from placement.schemas import allocation
from placement.schemas import inventory


def _reshaper(consumer_schema):
    return {
        "type": "object",
        "properties": {
            "inventories": {
                "type": "object",
                "minProperties": 1,
                "patternProperties": {
                    allocation.UUID_KEY_PATTERN: {
                        "type": "object",
                        "properties": {
                            "resource_provider_generation": {"type": "integer"},
                            # Same records (and defaults) as PUT inventories.
                            "inventories": inventory.PUT_INVENTORIES["properties"][
                                "inventories"
                            ],
                        },
                        "required": ["resource_provider_generation", "inventories"],
                        "additionalProperties": False,
                    },
                },
                "additionalProperties": False,
            },
            "allocations": allocation.consumers_object(
                consumer_schema, min_properties=0
            ),
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": False,
    }


RESHAPER_SCHEMA = versions.Table(
    *((first, _reshaper(consumer)) for first, consumer in allocation.CONSUMER_SCHEMAS)
)
