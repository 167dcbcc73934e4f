"""The microversion machinery (doc/api.md "Request rules"): header parsing,
Version
comparisons and VersionTable."""

import pytest

from placement.api import microversion
from placement.api.microversion import Version


@pytest.mark.parametrize(
    "header,expected",
    [
        (None, "1.0"),
        ("", "1.0"),
        ("placement 1.5", "1.5"),
        ("PlAcEmEnT 1.5", "1.5"),
        ("placement latest", "1.39"),
        ("placement 1.05", "1.5"),
        ("placement  1.7 ", "1.7"),
        ("placement\t1.7", "1.7"),
        ("placement 1.3, compute 2.1, placement 1.7", "1.7"),
        ("placement 1.7,compute 2.1", "1.7"),
        ("compute 2.5", "1.0"),
        ("placement", "1.0"),
        ("placement 1.0", "1.0"),
        ("placement 1.39", "1.39"),
        ("placement 1.a, placement 1.4", "1.4"),  # right-most wins, left unread
    ],
)
def test_extract_version(header, expected):
    assert str(microversion.extract_version(header)) == expected


@pytest.mark.parametrize("value", ["1", "foo", "LATEST", "1.5.1", "1.a", "1.", ".5"])
def test_invalid_version_string(value):
    with pytest.raises(
        microversion.InvalidVersion, match="invalid version string: %s" % value
    ):
        microversion.extract_version("placement %s" % value)


@pytest.mark.parametrize("value", ["1.40", "2.0", "0.9", "-1.5"])
def test_unacceptable_version(value):
    with pytest.raises(
        microversion.UnacceptableVersion,
        match="Unacceptable version header: %s" % value,
    ):
        microversion.extract_version("placement %s" % value)


def test_version_compares_with_versions_and_strings():
    v = Version(1, 20)
    assert v == "1.20" and v == Version(1, 20)
    assert v > "1.9"  # numeric, not lexical
    assert v < "1.100"
    assert v >= "1.20" and v <= "1.20"
    assert v != "1.2"
    assert sorted([Version(1, 10), Version(1, 2)]) == ["1.2", "1.10"]
    assert hash(Version.parse("1.05")) == hash(Version(1, 5))
    assert str(Version.parse("1.05")) == repr(Version(1, 5)) == "1.5"


@pytest.mark.parametrize(
    "version,lo,hi,expected",
    [
        ("1.5", None, None, True),
        ("1.5", "1.5", None, True),
        ("1.4", "1.5", None, False),
        ("1.7", "1.2", "1.6", False),
        ("1.6", "1.2", "1.6", True),
    ],
)
def test_matches(version, lo, hi, expected):
    assert Version.parse(version).matches(lo, hi) is expected


def test_min_and_max():
    assert str(microversion.MIN_VERSION) == "1.0"
    assert str(microversion.MAX_VERSION) == "1.39"


def test_version_table_picks_latest_row_not_after_version():
    table = microversion.VersionTable((None, "a"), ("1.20", "c"), ("1.10", "b"))
    assert table(Version(1, 0)) == "a"
    assert table(Version(1, 9)) == "a"
    assert table(Version(1, 10)) == "b"
    assert table(Version(1, 19)) == "b"
    assert table(Version(1, 20)) == "c"
    assert table(microversion.MAX_VERSION) == "c"


def test_version_table_without_default_raises_below_first_row():
    table = microversion.VersionTable(("1.6", "x"))
    with pytest.raises(LookupError):
        table(Version(1, 5))


def test_since():
    assert microversion.since("1.15", Version(1, 15))
    assert not microversion.since("1.15", Version(1, 14))
