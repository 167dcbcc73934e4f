"""``placement-manage audit [--kind K ...] [--in-tree UUID ...] [--json]``:
the data audit (doc/audit.md), as text or as the JSON of GET
/maintenance/audit. Exit 0 when nothing is wrong, 1 when a check of
severity error found rows (information alone does not count), 2 for
arguments the audit cannot take."""

import json
import sys

from placement.objects import audit as audit_obj
from placement.schemas import uuids

SHOWN = 20  # items printed per kind; --json lists up to audit_obj.ITEMS


def _value(value):
    if isinstance(value, list):
        return "[%s]" % "; ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return " ".join("%s=%s" % (k, _value(v)) for k, v in value.items())
    return str(value)


def _print_check(check):
    print(
        "%s (%s): %d. %s."
        % (check["kind"], check["severity"], check["count"], check["title"])
    )
    if not check["count"]:
        return
    for item in check["items"][:SHOWN]:
        print("  - " + _value(item))
    hidden = check["count"] - min(SHOWN, len(check["items"]))
    if hidden > 0:
        print("  (%d more; --json lists up to %d)" % (hidden, audit_obj.ITEMS))
    print("  What to do: " + check["fix"])


def _refused(message):
    print("audit: " + message, file=sys.stderr)
    return 2


def audit(conf, db):
    trees = conf.category.in_tree
    kinds = conf.category.kind or (audit_obj.TREE_KINDS if trees else audit_obj.KINDS)
    if trees:
        outside = sorted(set(kinds) - set(audit_obj.TREE_KINDS))
        if outside:
            return _refused(
                "--in-tree applies to the kinds %s only, not %s."
                % (", ".join(audit_obj.TREE_KINDS), ", ".join(outside))
            )
        malformed = uuids.first_malformed(trees)
        if malformed is not None:
            return _refused(uuids.NOT_A_UUID % malformed)
        unknown = audit_obj.unknown_providers(db, trees)
        if unknown:
            return _refused("no resource provider %s." % ", ".join(unknown))
    found = audit_obj.run(db, kinds, in_tree=trees or None)
    if conf.category.json:
        print(json.dumps(found, indent=2, sort_keys=True))
    else:
        for check in found["checks"]:
            _print_check(check)
        print(
            "%d problem%s found."
            % (found["problems"], "" if found["problems"] == 1 else "s")
            if found["problems"]
            else "Nothing is wrong."
        )
    return 1 if found["problems"] else 0


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "audit",
        help="What in the database is wrong, and the fixes.",
    )
    parser.add_argument(
        "--kind",
        action="append",
        choices=audit_obj.KINDS,
        help="Run only this check (may repeat; default all).",
    )
    parser.add_argument(
        "--in-tree",
        dest="in_tree",
        action="append",
        metavar="UUID",
        help="Only the rows of this provider's tree (may repeat), for the "
        "kinds %s, which are then the default." % ", ".join(audit_obj.TREE_KINDS),
    )
    parser.add_argument(
        "--json", action="store_true", help="The JSON of GET /maintenance/audit."
    )
    parser.set_defaults(func=audit)
