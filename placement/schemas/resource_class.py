"""Schemas for /resource_classes bodies (POST, and PUT 1.2-1.6 rename).

PUT 1.7+ has no body: the path name is validated against the same schema
wrapped as ``{"name": <path name>}``.
"""

CUSTOM_NAME_PATTERN = "^CUSTOM_[A-Z0-9_]+$"

RESOURCE_CLASS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": CUSTOM_NAME_PATTERN, "maxLength": 255},
    },
    "required": ["name"],
    "additionalProperties": False,
}
