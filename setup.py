"""Everything but the package list is in setup.cfg. The list lives here
because setup.cfg cannot combine package discovery with mapped
directories: the top-level ``migrations/`` ships as ``placement.migrations``
so an installed placement finds its alembic revisions, and
``etc/placement/`` as ``placement/etc/`` so that the configuration and
policy samples come with every install."""

import setuptools

setuptools.setup(
    packages=setuptools.find_packages(include=["placement", "placement.*"])
    + ["placement.migrations", "placement.migrations.versions", "placement.etc"]
    + ["placement.ui"],
    package_dir={
        "placement.migrations": "migrations",
        "placement.etc": "etc/placement",
    },
    package_data={
        "placement.migrations": ["script.py.mako"],
        "placement.etc": ["*.sample", "*-generator.conf"],
        "placement.ui": ["*.html", "*.js", "*.css", "*.ico"],
    },
)
