"""Schemas for PUT /resource_providers/{uuid}/aggregates."""

# Aggregate ids are stored exactly as sent in a VARCHAR(36), so longer
# UUID-like spellings (braced, urn:uuid:) are refused here rather than
# failing in the database.
AGGREGATES = {
    "type": "array",
    "items": {"type": "string", "format": "uuid", "maxLength": 36},
    "uniqueItems": True,
}

AGGREGATES_WITH_GENERATION = {
    "type": "object",
    "properties": {
        "aggregates": AGGREGATES,
        "resource_provider_generation": {"type": "integer"},
    },
    "required": ["aggregates", "resource_provider_generation"],
    "additionalProperties": False,
}
