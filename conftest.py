pytest_plugins = ["tests.functional.gabbi_plugin"]


def pytest_configure(config):
    # Every test, gabbi files included: a write that changes a table the
    # provider catalog keeps without recording it fails (in production it
    # is logged as EVERYTHING and reported; doc/architecture.md "Catalog
    # changes").
    from placement.objects.catalog import changes

    def unrecorded(tables):
        raise AssertionError(
            "a write changed %s without recording a catalog change"
            % ", ".join(sorted(tables))
        )

    changes.on_unrecorded = unrecorded
