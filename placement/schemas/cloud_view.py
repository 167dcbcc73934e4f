"""Schema of GET /roots's query (the console's cloud view)."""

_STRING = {"type": "string"}

QUERY = {
    "type": "object",
    "properties": {
        "name": _STRING,
        "member_of": _STRING,
        "resources": _STRING,
        "required": _STRING,
        "page": {"type": "string", "pattern": "^(0|[1-9][0-9]{0,8})$"},
        "limit": {"type": "string", "pattern": "^([1-9][0-9]{0,2}|1000)$"},
    },
    "additionalProperties": False,
}
