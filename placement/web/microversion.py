"""Microversion negotiation: the version a request asks for in its
``OpenStack-API-Version`` header. What each version changes is
``placement.versions`` (see "Microversions" in doc/architecture.md).
"""

import functools
import re

from placement import versions

SERVICE_TYPE = "placement"
HEADER = "OpenStack-API-Version"
# The answer's Vary when its body or headers depend on the version asked.
VARY = "openstack-api-version"


def answered(shown: str) -> str:
    """The answer's OpenStack-API-Version value for the version ``shown``
    ("1.39")."""
    return "%s %s" % (SERVICE_TYPE, shown)


class InvalidVersion(Exception):
    """The header's version string cannot be parsed (400)."""


class UnacceptableVersion(Exception):
    """The version parsed but is not supported (406)."""


_WS = re.compile(r"\s+")


# Clients send a few distinct headers, each on every request: their
# answers are kept (an error is not, so a flood of bad values costs no
# memory).
@functools.lru_cache(maxsize=64)
def extract_version(headers: str | None) -> versions.Version:
    """Return the requested Version (the minimum when none is asked for).

    ``headers`` is the folded value of every OpenStack-API-Version line.
    """
    value = headers or ""
    requested = None
    for entry in reversed(value.split(",")):
        parts = _WS.split(entry.strip(), maxsplit=1)
        if len(parts) != 2:
            continue
        service, version = parts
        if service.lower() == SERVICE_TYPE:
            requested = version.strip()
            break
    if not requested:
        return versions.MIN
    if requested == "latest":
        return versions.MAX
    try:
        parsed = versions.Version.parse(requested)
    except ValueError:
        raise InvalidVersion("invalid version string: %s" % requested)
    if not versions.MIN <= parsed <= versions.MAX:
        raise UnacceptableVersion("Unacceptable version header: %s" % requested)
    return parsed
