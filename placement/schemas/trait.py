"""Schemas for /traits and /resource_providers/{uuid}/traits."""

# Custom trait names (CUSTOM_ and upper-case letters, digits, _); standard
# names fail it too, which is how
# PUT /traits/{name} refuses to create them.
CUSTOM_TRAIT_PATTERN = "^CUSTOM_[A-Z0-9_]+$"
CUSTOM_TRAIT = {
    "type": "string",
    "pattern": CUSTOM_TRAIT_PATTERN,
    "minLength": 1,
    "maxLength": 255,
}

LIST_TRAITS_QUERY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "associated": {"type": "string"},
    },
    "additionalProperties": False,
}

SET_PROVIDER_TRAITS = {
    "type": "object",
    "properties": {
        "traits": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 255},
        },
        "resource_provider_generation": {"type": "integer"},
    },
    "required": ["traits", "resource_provider_generation"],
    "additionalProperties": False,
}
