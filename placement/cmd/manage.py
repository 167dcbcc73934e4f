"""``placement-manage [--config-file PATH] [--config-dir DIR] db <command>``.

Commands: ``sync``, ``downgrade <revision>``, ``version``,
``stamp <revision>`` and ``online_data_migrations [--max-count N]``; and
``placement-manage capacity --resources ...`` (doc/capacity.md) and
``placement-manage drain-plan --providers ...`` (doc/drain.md).
``placement-manage audit`` (doc/audit.md).
"""

import json
import sys

import prettytable
from oslo_config import cfg

from placement import conf as placement_conf
from placement import startup
from placement import versions
from placement.cmd import audit as audit_cmd
from placement.db import schema
from placement.objects import online_migrations
from placement.objects import standard_names
from placement.schemas import uuids

DEFAULT_BATCH = 50
# online_data_migrations exit codes
MORE_TO_DO, FAILED, BAD_MAX_COUNT = 1, 2, 127

_PARSERS = {}


def db_sync(conf, db):
    before, after = schema.upgrade(db.engine)
    # The standard traits and classes too, as a starting server would add
    # them: servers started together on the database then have nothing to
    # add, and none writes while another (the reference, whose start-up
    # sync on SQLite fails on a write committed between its read and its
    # insert) is adding them.
    standard_names.sync_standard_names(db)
    if before == after:
        print("Schema already at head %s." % after)
    else:
        print("Schema upgraded from %s to %s." % (before or "empty", after))
    return 0


def db_downgrade(conf, db):
    try:
        before, after = schema.downgrade(db.engine, conf.category.version)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 1
    if before == after:
        print("Schema already at %s." % after)
    else:
        print("Schema downgraded from %s to %s." % (before, after))
    return 0


def db_version(conf, db):
    revision = schema.current_revision(db.engine)
    print(revision or "no schema (run placement-manage db sync)")
    return 0


def db_stamp(conf, db):
    schema.stamp(db.engine, conf.category.version)
    return 0


def _run_batch(db, max_count):
    """One pass over every migration, sharing ``max_count`` rows between
    them. Returns ({name: (found, done)}, exceptions seen)."""
    results, failed = {}, False
    for name, migration in online_migrations.MIGRATIONS.items():
        budget = max_count - sum(done for _, done in results.values())
        if budget <= 0:
            break
        try:
            results[name] = migration(db, budget)
        except Exception:
            print("Error attempting to run %s" % name, file=sys.stderr)
            failed = True
            results[name] = (0, 0)
    return results, failed


def _print_table(totals):
    table = prettytable.PrettyTable(["Migration", "Total Found", "Completed"])
    for name in online_migrations.MIGRATIONS:
        found, done = totals.get(name, (0, 0))
        table.add_row([name, found, done])
    print(table)


def db_online_data_migrations(conf, db):
    """Without --max-count: batches of 50 until nothing is left to do.
    With it: one batch of at most N rows; exit 1 if it migrated some."""
    max_count = conf.category.max_count
    if max_count is not None:
        try:
            max_count = int(max_count)
        except ValueError:
            max_count = 0
        if max_count < 1:
            print("Must supply a positive value for max_count", file=sys.stderr)
            return BAD_MAX_COUNT
    totals = {}
    while True:
        results, failed = _run_batch(db, max_count or DEFAULT_BATCH)
        for name, (found, done) in results.items():
            # "Total Found" is what the first batch saw; later ones less.
            first_found, so_far = totals.get(name, (found, 0))
            totals[name] = (first_found, so_far + done)
        ran = any(done for _, done in results.values())
        if max_count is not None or not ran:
            break
    _print_table(totals)
    if failed and not ran:
        return FAILED
    if max_count is not None and ran:
        return MORE_TO_DO
    return 0


def capacity(conf, db):
    """How many more instances of the request fit: the top hosts and the
    total, as a table or (``--json``) the answer of GET
    /allocation_candidates/capacity."""
    # The candidate engine's modules, imported by the two commands that
    # use them: the db commands start without them (placement/startup.py).
    from placement.handlers.candidates import query as candidate_query
    from placement.objects import capacity as capacity_obj

    args = conf.category
    pairs = [("resources", args.resources)]
    pairs += [("required", r) for r in args.required or ()]
    pairs += [("member_of", m) for m in args.member_of or ()]
    found = candidate_query.run_query(db, pairs, versions.MAX, capacity_obj.compute)
    if args.json:
        print(json.dumps(found.as_dict(), indent=2, sort_keys=True))
        return 0
    table = prettytable.PrettyTable(["Host", "UUID", "Count", "Limited by"])
    for root in found.roots[: args.top]:
        table.add_row(
            [root["name"], root["uuid"], root["count"], ", ".join(root["limited_by"])]
        )
    print(table)
    hidden = len(found.roots) - args.top
    if hidden > 0:
        print("(%d more hosts)" % hidden)
    print(
        "Total: %d%s"
        % (found.capacity, "" if found.exact else " (upper bound, see doc/capacity.md)")
    )
    return 0


def _add_capacity_parser(parser):
    parser.add_argument(
        "--resources", required=True, help="As resources= of the API: VCPU:1,..."
    )
    parser.add_argument(
        "--required", action="append", help="As required= (may repeat)."
    )
    parser.add_argument(
        "--member-of",
        dest="member_of",
        action="append",
        help="As member_of= (may repeat).",
    )
    parser.add_argument(
        "--top", type=int, default=20, help="Hosts listed (default 20)."
    )
    parser.add_argument("--json", action="store_true", help="The API's JSON answer.")
    parser.set_defaults(func=capacity)


def drain_plan(conf, db):
    """Where the consumers of some trees would go if they were emptied:
    the moves and the consumers left, as a table, or (``--json``) the
    answer of GET /maintenance/drain."""
    from placement.handlers import drain as drain_handler

    args = conf.category
    named = [u for value in args.providers or () for u in value.split(",")]
    named += [args.in_tree] if args.in_tree else []
    malformed = uuids.first_malformed(named)
    if malformed is not None:
        print("drain-plan: " + uuids.NOT_A_UUID % malformed, file=sys.stderr)
        return 1
    pairs = [("providers", ",".join(args.providers))] if args.providers else []
    pairs += [("in_tree", args.in_tree)] if args.in_tree else []
    pairs += [("member_of", args.member_of)] if args.member_of else []
    pairs += [("strategy", args.strategy)]
    pairs += [("required", r) for r in args.required or ()]
    pairs += [("target_member_of", m) for m in args.target_member_of or ()]
    found = drain_handler.plan(db, pairs)
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    moves = prettytable.PrettyTable(["Consumer", "From", "To", "Allocations"])
    for move in found["moves"]:
        moves.add_row(
            [
                move["consumer"],
                move["source"]["name"],
                move["target"]["name"],
                _amounts(move["allocations"]),
            ]
        )
    print(moves)
    if found["unplaced"]:
        left = prettytable.PrettyTable(["Consumer", "From", "Why it fits nowhere"])
        for entry in found["unplaced"]:
            left.add_row([entry["consumer"], entry["source"]["name"], entry["reason"]])
        print(left)
    totals = found["totals"]
    print(
        "Placed %d of %d consumers, %d left. Free after the plan: %s"
        % (
            totals["placed"],
            totals["consumers"],
            totals["left"],
            ", ".join(
                "%s %d of %d" % (rc, c["free"], c["capacity"])
                for rc, c in found["capacity_left"].items()
            ),
        )
    )
    return 0


def _amounts(allocations):
    return "; ".join(
        "%s %s"
        % (rp, ",".join("%s:%d" % (rc, n) for rc, n in held["resources"].items()))
        for rp, held in allocations.items()
    )


def _add_drain_parser(parser):
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument(
        "--providers", nargs="+", help="Drain the trees of these provider uuids."
    )
    chosen.add_argument("--in-tree", dest="in_tree", help="Drain this tree.")
    chosen.add_argument(
        "--member-of",
        dest="member_of",
        help="Drain the trees with a provider in this aggregate.",
    )
    parser.add_argument(
        "--strategy", choices=("first", "spread", "pack"), default="first"
    )
    parser.add_argument(
        "--required",
        action="append",
        help="As required=: traits a consumer keeps where its providers carry "
        "them; !T forbids (may repeat).",
    )
    parser.add_argument(
        "--target-member-of",
        dest="target_member_of",
        action="append",
        help="As member_of=, for the targets (may repeat).",
    )
    parser.add_argument("--json", action="store_true", help="The API's JSON answer.")
    parser.set_defaults(func=drain_plan)


def _add_db_parsers(db_parser):
    _PARSERS["db"] = db_parser
    commands = db_parser.add_subparsers(dest="db_command")
    commands.add_parser(
        "sync", help="Upgrade the schema to the latest revision."
    ).set_defaults(func=db_sync)
    # help= is the line in `db --help`; description= heads `db downgrade
    # --help` itself.
    about = (
        "Undo this service's own schema revisions down to the given one, "
        "no further down than %s (the upstream Placement schema, for a "
        "return to the reference service)." % schema.REFERENCE_HEAD
    )
    down = commands.add_parser("downgrade", help=about, description=about)
    down.add_argument(
        "version",
        help="The revision to go down to: %s or one of this service's own "
        "revisions above it." % schema.REFERENCE_HEAD,
    )
    down.set_defaults(func=db_downgrade)
    commands.add_parser(
        "version", help="Print the current schema revision."
    ).set_defaults(func=db_version)
    stamp = commands.add_parser(
        "stamp", help="Record a schema revision without running migrations."
    )
    stamp.add_argument("version", help="The revision to record.")
    stamp.set_defaults(func=db_stamp)
    online = commands.add_parser(
        "online_data_migrations", help="Run the online data migrations."
    )
    online.add_argument(
        "--max-count",
        metavar="<number>",
        dest="max_count",
        help="Migrate at most this many rows in one batch, then stop.",
    )
    online.set_defaults(func=db_online_data_migrations)


def add_command_parsers(subparsers):
    # Without a category placement-manage prints its help and exits 1,
    # rather than argparse's usage error (exit 2).
    subparsers.required = False
    _add_db_parsers(subparsers.add_parser("db", help="Database commands."))
    _add_capacity_parser(
        subparsers.add_parser(
            "capacity", help="How many more instances of a request fit."
        )
    )
    _add_drain_parser(
        subparsers.add_parser(
            "drain-plan", help="Where the consumers of some trees would go."
        )
    )
    audit_cmd.add_parser(subparsers)


command_opt = cfg.SubCommandOpt(
    "category",
    title="Command categories",
    help="Available categories",
    handler=add_command_parsers,
)


DESCRIPTION = (
    "Commands: db sync, db downgrade REVISION (no further down than %s), "
    "db version, db stamp REVISION, db online_data_migrations; capacity; "
    "drain-plan; audit; COMMAND --help tells more. "
    % schema.REFERENCE_HEAD
    + placement_conf.DEFAULT_CONFIG_HELP
)


def main(argv=None):
    conf = placement_conf.command_conf()
    conf.register_cli_opt(command_opt)
    argv = sys.argv[1:] if argv is None else argv
    # Log lines (alembic's steps, connection retries) go to stderr, apart
    # from the command's own output.
    conf.set_default("use_stderr", True)
    try:
        placement_conf.parse_args(conf, argv, description=DESCRIPTION)
        if conf.category.name is None:
            conf.print_help()
            return 1
        if getattr(conf.category, "func", None) is None:
            _PARSERS["db"].print_help()
            return 1
        startup.setup_logging(conf)
        db = startup.make_database(conf)
    except placement_conf.StartupError as e:
        return startup.fail("placement-manage", e, argv)
    try:
        return conf.category.func(conf, db)
    except Exception as e:
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    finally:
        db.engine.dispose()
