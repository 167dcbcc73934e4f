"""Microversion negotiation and the helpers that make version differences
visible in one place.

``Version`` is a comparable (major, minor) tuple. Routes are gated with
``api.decorators.versioned``/``by_version``; other differences are named
constants or ``VersionTable`` rows rather than ad-hoc comparisons (see
"Microversions" in doc/architecture.md).
"""

import functools
import re

SERVICE_TYPE = "placement"
HEADER = "OpenStack-API-Version"
MIN = (1, 0)
MAX = (1, 39)
_PARSED: dict[str, tuple[int, int]] = {}  # "X.Y" literal -> (X, Y)


@functools.total_ordering
class Version:
    """A microversion; compares with Versions and with "X.Y" strings."""

    __slots__ = ("major", "minor")

    def __init__(self, major, minor):
        self.major, self.minor = major, minor

    @classmethod
    def parse(cls, text):
        major, minor = text.split(".", 1)
        return cls(int(major), int(minor))

    @staticmethod
    def _key(other):
        if isinstance(other, str):
            # Handlers compare with string literals on hot paths: parse once.
            key = _PARSED.get(other)
            if key is None:
                major, minor = other.split(".", 1)
                key = _PARSED[other] = (int(major), int(minor))
            return key
        return (other.major, other.minor)

    def __str__(self):
        return "%d.%d" % (self.major, self.minor)

    __repr__ = __str__

    def __eq__(self, other):
        return (self.major, self.minor) == self._key(other)

    def __lt__(self, other):
        return (self.major, self.minor) < self._key(other)

    def __ge__(self, other):
        return (self.major, self.minor) >= self._key(other)

    def __hash__(self):
        return hash((self.major, self.minor))

    def matches(self, min_version=None, max_version=None):
        return (min_version is None or self >= min_version) and (
            max_version is None or self <= max_version
        )


MIN_VERSION = Version(*MIN)
MAX_VERSION = Version(*MAX)


class InvalidVersion(Exception):
    """The header's version string cannot be parsed (400)."""


class UnacceptableVersion(Exception):
    """The version parsed but is not supported (406)."""


_WS = re.compile(r"\s+")


def extract_version(headers):
    """Return the requested Version from a header value (or None).

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
        return MIN_VERSION
    if requested == "latest":
        return MAX_VERSION
    try:
        major, minor = requested.split(".", 1)
        version = Version(int(major), int(minor))
    except ValueError:
        raise InvalidVersion("invalid version string: %s" % requested)
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnacceptableVersion("Unacceptable version header: %s" % requested)
    return version


class VersionTable:
    """A behaviour that changes with the microversion, written once.

    ``VersionTable((None, a), ("1.20", b))`` answers ``b`` from 1.20 on and
    ``a`` before.
    """

    def __init__(self, *rows):
        self._rows = sorted(
            ((Version.parse(v) if v else MIN_VERSION, value) for v, value in rows),
            key=lambda row: row[0],
            reverse=True,
        )

    def __call__(self, version):
        for since, value in self._rows:
            if version >= since:
                return value
        raise LookupError(version)


def since(min_version, version):
    return version >= min_version
