"""The microversion machinery (doc/api.md "Request rules"): header parsing,
Version comparisons and the version table."""

import pytest

from placement import versions
from placement.versions import Version
from placement.web import microversion


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


def test_versions_compare_numerically():
    v = Version(1, 20)
    assert v == "1.20" and v == Version(1, 20)
    assert v > Version(1, 9)  # numeric, not lexical
    assert v < Version(1, 100)
    assert v >= Version(1, 20) and v <= Version(1, 20)
    assert v != "1.2"
    assert sorted([Version(1, 10), Version(1, 2)]) == ["1.2", "1.10"]
    assert hash(Version.parse("1.05")) == hash(Version(1, 5))
    assert str(Version.parse("1.05")) == repr(Version(1, 5)) == "1.5"


@pytest.mark.parametrize(
    "version,first,before,expected",
    [
        ("1.5", None, None, True),
        ("1.5", "1.5", None, True),
        ("1.4", "1.5", None, False),
        ("1.7", "1.2", "1.7", False),
        ("1.6", "1.2", "1.7", True),
    ],
)
def test_within(version, first, before, expected):
    first = Version.parse(first) if first else None
    before = Version.parse(before) if before else None
    assert Version.parse(version).within(first, before) is expected


def test_min_and_max():
    assert str(versions.MIN) == "1.0"
    assert str(versions.MAX) == "1.39"


def test_the_table_names_each_version_once_in_order():
    """Every version from MIN to MAX introduced one named behaviour, in
    the order of the module (ROOT_REQUIRED_GRAMMAR aside, an alias)."""
    named = [
        value
        for name, value in vars(versions).items()
        if isinstance(value, Version)
        and name not in ("MIN", "MAX", "ROOT_REQUIRED_GRAMMAR")
    ]
    assert named == [Version(1, minor) for minor in range(1, versions.MAX.minor + 1)]


def test_table_picks_latest_row_not_after_version():
    table = versions.Table((None, "a"), (Version(1, 20), "c"), (Version(1, 10), "b"))
    assert table(Version(1, 0)) == "a"
    assert table(Version(1, 9)) == "a"
    assert table(Version(1, 10)) == "b"
    assert table(Version(1, 19)) == "b"
    assert table(Version(1, 20)) == "c"
    assert table(versions.MAX) == "c"


def test_table_without_default_raises_below_first_row():
    table = versions.Table((versions.TRAITS, "x"))
    with pytest.raises(LookupError):
        table(Version(1, 5))
