"""Everything but the package list is in setup.cfg. The list lives here
because setup.cfg cannot combine package discovery with a mapped
directory: the top-level ``migrations/`` ships as ``placement.migrations``
so an installed placement finds its alembic revisions."""

import setuptools

setuptools.setup(
    packages=setuptools.find_packages(include=["placement", "placement.*"])
    + ["placement.migrations", "placement.migrations.versions"],
    package_dir={"placement.migrations": "migrations"},
    package_data={"placement.migrations": ["script.py.mako"]},
)
