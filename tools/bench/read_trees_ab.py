"""CPU per request, in process, of small GETs (by default wrk_serve.py's
``GET /resource_providers/{uuid}/allocations`` and ``GET
/resource_providers/{uuid}``) by two code trees (``--base``, e.g. a
``git archive`` of main, and ``--new``, this one by default), each in a
process of its own on a fresh database of the same MariaDB, batches of
200 of each request alternated between them (which goes first swapped
every round: a busy machine slows both alike). Medians over the
batches of the CPU (thread time) per request, the statements per
request, and whether the trees' bodies are the same.

The provider is wrk_serve.py's with ``--consumers`` consumers of a
host's instance each (VCPU, MEMORY_MB, DISK_GB), written before the
first read (the catalog holds them in its columns, as a fleet's
allocations are read at start) and ``--overlay`` more written after it
(in the overlay the catalog follows the log into).

    .venv/bin/python tools/bench/read_trees_ab.py --base <tree> \\
        [--consumers 4] [--overlay 0] [--version 1.39] [--path P ...]

``--callgrind``: instead, each tree's child once under valgrind's
callgrind, counting the instructions of a batch of each request alone
(callgrind.h's client requests, through a small library compiled with
``cc``): the same on a busy machine as on an idle one.

MariaDB at PLACEMENT_TEST_MYSQL_URL (``--driver mysqldb``: through
mysqlclient). The child (``--child TREE``) imports ``placement`` from
TREE and runs a batch per line read.
"""

import argparse
import ctypes
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import figures_file
import tree_batches

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
BATCH = 200
INSTANCE = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
# Counting on and off around a batch (``--callgrind``): the counts since
# the last dump, dumped under the batch's name.
COUNTING = """
#include <valgrind/callgrind.h>
void counted(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void dumped(const char *name) {
    CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(name); }
"""


def _consumer(n):
    return "c0ffee00-0000-4000-8000-%012x" % (0x100 + n)


def child(args):
    sys.path[:0] = [args.child, os.path.join(args.child, "tools", "bench")]
    import profile_request
    import wrk_serve

    from placement import deploy
    from placement.cmd import api
    from tests import fixtures
    from tests import wsgi_client

    conf = profile_request.noauth_conf()
    # Written at wrk_serve.py's microversion, read at --version.
    written = dict(wrk_serve.HEADERS)
    read = dict(written, **{"openstack-api-version": "placement " + args.version})
    rp = wrk_serve.PROVIDER
    paths = [path.format(uuid=rp) for path in args.path]
    with fixtures.database_url(args.driver) as url:
        with profile_request.at_head(url, conf) as db:
            conf.set_override("connection", url, group="placement_database")
            app = deploy.build_app(conf, db=db, sync_schema=False)
            api.tune_gc()  # as placement-api does in every worker

            def call(path, method="GET", body=None):
                headers = read if method == "GET" else written
                resp = wsgi_client.call(app, path, method, body, headers=headers)
                assert resp.status < 300, (method, path, resp.status, resp.body)
                return resp.body

            def allocate(n):
                call(
                    "/allocations/" + _consumer(n),
                    "PUT",
                    {
                        "allocations": {rp: {"resources": INSTANCE}},
                        "project_id": wrk_serve.PROJECT,
                        "user_id": wrk_serve.PROJECT,
                        "consumer_generation": None,
                        "consumer_type": "INSTANCE",
                    },
                )

            call("/resource_providers", "POST", {"name": rp, "uuid": rp})
            inventories = {rc: {"total": 1_000_000} for rc in INSTANCE}
            call(
                "/resource_providers/%s/inventories" % rp,
                "PUT",
                {"resource_provider_generation": 0, "inventories": inventories},
            )
            for n in range(args.consumers):
                allocate(n)
            for path in paths:
                call(path)
            for n in range(args.overlay):
                allocate(args.consumers + n)
            counter = profile_request.StatementCounter(db.engine)
            if args.counting:
                counting = ctypes.CDLL(args.counting)
                for path in paths:
                    call(path)
                    counting.counted()
                    for _ in range(BATCH):
                        call(path)
                    counting.dumped(path.encode())
                return
            print(json.dumps({"ready": True}), flush=True)
            for _ in sys.stdin:
                out = {}
                for path in paths:
                    before = counter.count
                    start = time.thread_time()
                    for _ in range(BATCH):
                        body = call(path)
                    out[path] = {
                        "ms": (time.thread_time() - start) / BATCH * 1e3,
                        "statements": (counter.count - before) / BATCH,
                        "body": hashlib.sha256(body).hexdigest(),
                    }
                print(json.dumps(out), flush=True)


def trees_ab(args):
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    child_args = []
    for name in ("driver", "version", "consumers", "overlay"):
        child_args += ["--" + name, str(getattr(args, name))]
    for path in args.path:
        child_args += ["--path", path]
    batches, load = tree_batches.alternated(__file__, trees, child_args, args.batches)
    found = {label: {} for label in trees}
    for label, outs in batches.items():
        for out in outs:
            for path, figures in out.items():
                found[label].setdefault(path, []).append(figures)
    figures = {
        "tool": "tools/bench/read_trees_ab.py (CPU ms per request)",
        **{name: getattr(args, name) for name in ("driver", "version", "batches")},
        **{name: getattr(args, name) for name in ("consumers", "overlay")},
        "load": load,
        "results": [],
    }
    for path in found["base"]:
        each = {label: found[label][path] for label in trees}
        medians = {
            label: statistics.median(f["ms"] for f in runs)
            for label, runs in each.items()
        }
        result = {
            "path": path,
            **{
                label: {
                    "median_ms": medians[label],
                    "min_ms": min(f["ms"] for f in runs),
                    "statements": sorted({f["statements"] for f in runs}),
                }
                for label, runs in each.items()
            },
            "ratio": medians["new"] / medians["base"],
            "same_body": len({f["body"] for runs in each.values() for f in runs}) == 1,
        }
        figures["results"].append(result)
        print(
            "%s: base %.4f ms (min %.4f, %s statements), new %.4f ms "
            "(min %.4f, %s), ratio %.3f, same body %s"
            % (
                path,
                medians["base"],
                result["base"]["min_ms"],
                result["base"]["statements"],
                medians["new"],
                result["new"]["min_ms"],
                result["new"]["statements"],
                result["ratio"],
                result["same_body"],
            ),
            flush=True,
        )
    print("driver %s, load %s -> %s" % (args.driver, *load))
    return figures


def _instructions(args, out):
    """{tree label: {path: instructions per request}}, each tree's child
    once under callgrind, its dumps in directory ``out``."""
    library = os.path.join(out, "counting.so")
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-x", "c", "-", "-o", library],
        input=COUNTING,
        text=True,
        check=True,
    )
    counts = {}
    for label, tree in (("base", args.base), ("new", args.new)):
        tree = os.path.abspath(tree)
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--callgrind-out-file=%s/%s.%%p" % (out, label),
            sys.executable,
            __file__,
            "--child",
            tree,
            "--counting",
            library,
        ]
        for name in ("driver", "version", "consumers", "overlay"):
            command += ["--" + name, str(getattr(args, name))]
        for path in args.path:
            command += ["--path", path]
        subprocess.run(
            command,
            check=True,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONPATH=tree),
        )
        counts[label] = {}
        for dump in glob.glob("%s/%s.*.*" % (out, label)):
            with open(dump) as f:
                lines = f.read().splitlines()
            name = next(x for x in lines if x.startswith("desc: Trigger:"))
            total = next(x for x in lines if x.startswith("totals:"))
            path = name.rsplit(": ", 1)[1].removeprefix("Client Request ")
            counts[label][path] = int(total.split()[1]) / BATCH
    return counts


def callgrind_ab(args):
    """Instructions per request of each tree (``--callgrind``)."""
    with tempfile.TemporaryDirectory(prefix="read-trees-") as out:
        counts = _instructions(args, out)
    figures = {
        "tool": "tools/bench/read_trees_ab.py --callgrind (instructions per request)",
        **{name: getattr(args, name) for name in ("driver", "version")},
        **{name: getattr(args, name) for name in ("consumers", "overlay")},
        "results": [],
    }
    for path, base in counts["base"].items():
        new = counts["new"][path]
        figures["results"].append(
            {"path": path, "base": base, "new": new, "ratio": new / base}
        )
        print(
            "%s: base %.0f, new %.0f instructions a request, ratio %.3f"
            % (path, base, new, new / base),
            flush=True,
        )
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the base tree (e.g. a git archive of main)")
    parser.add_argument("--new", default=TREE, help="the new tree (default: this)")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--driver", choices=("mysql", "mysqldb"), default="mysqldb")
    parser.add_argument("--version", default="1.39", help="the microversion")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--overlay", type=int, default=0)
    parser.add_argument(
        "--path",
        action="append",
        help="a GET path, {uuid} the provider's (default: its allocations, it)",
    )
    parser.add_argument(
        "--callgrind", action="store_true", help="count instructions instead"
    )
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--counting", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.path = args.path or [
        "/resource_providers/{uuid}/allocations",
        "/resource_providers/{uuid}",
    ]
    if args.child:
        return child(args)
    if not args.base:
        parser.error("--base TREE")
    figures = callgrind_ab(args) if args.callgrind else trees_ab(args)
    figures_file.write(args.out, figures)


if __name__ == "__main__":
    main()
