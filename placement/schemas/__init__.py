"""JSON schemas for request bodies and query strings, one module per resource."""

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from placement import versions

# Modules of schemas that no request is checked against.
_NOT_REQUESTS = ("responses",)


def request_schemas() -> list[Mapping[str, Any]]:
    """Every schema of the request modules: each module's constants that
    are schemas (a mapping whose "type" names one), and each value of its tables
    (``versions.Table``) that is one."""
    found: dict[int, Mapping[str, Any]] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name in _NOT_REQUESTS:
            continue
        names = vars(importlib.import_module("%s.%s" % (__name__, module.name)))
        for value in list(names.values()):
            values = value.values() if isinstance(value, versions.Table) else [value]
            for schema in values:
                if isinstance(schema, Mapping) and isinstance(
                    schema.get("type"), (str, list)
                ):
                    found[id(schema)] = schema
    return list(found.values())
