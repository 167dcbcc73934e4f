"""Alembic environment: runs revisions on the engine placement hands over.

``placement.db.schema`` puts the configured engine in
``config.attributes["engine"]``; the ``alembic`` command line can instead
give ``sqlalchemy.url`` in its ini file.
"""

import sqlalchemy as sa
from alembic import context

from placement.db import api as db_api
from placement.db import tables

config = context.config


def run_migrations_online():
    engine = config.attributes.get("engine")
    if engine is None:
        engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
    # Without [placement_database] statement_timeout: a revision may take
    # long on big tables.
    with db_api.unbounded(engine) as connection:
        # SQLite cannot ALTER constraints in place: batch mode rebuilds the
        # table there and is a plain ALTER elsewhere. One transaction per
        # revision: PostgreSQL's DDL is transactional, and a revision that
        # refuses to run must not undo the ones before it (as on MySQL).
        context.configure(
            connection=connection,
            target_metadata=tables.metadata,
            render_as_batch=True,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("placement migrations need a database connection")
run_migrations_online()
