"""Alembic revisions, installed as ``placement.migrations``."""
