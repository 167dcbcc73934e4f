"""Server CPU per request over HTTP, measured with wrk (a C client, so the
client's own CPU does not cap the rate), for each of placement-api's HTTP
servers side by side.

Starts ``placement-api --server S --workers 1`` on a fresh database with
one provider (inventory, one consumer's allocation), then for each request
(``--request`` picks some)
runs ``wrk -t1 -c4 -d<duration>s`` (4 kept-alive connections) and reads
the server's CPU time from /proc (its process group): CPU per request,
requests/s and wrk's latency. A claim is its candidate GET and its PUT of
a new consumer's allocations (wrk alternates them; CPU per claim counts
both), and the server's context switches per request (its threads'
voluntary ones count its hand-offs between threads). A registration is
a host's POST of a new provider, the PUT of its inventories and of its
traits, one request at a time on one connection (CPU per request).
``--close`` sends every request with ``Connection: close``: a new TCP
connection each, as the shared bench's client opens. Each round runs
every server once, in turn, for each code tree given (``--tree
LABEL=DIR``: placement imported from DIR, e.g. ``git archive`` of
another commit, alternated with this one in the same run) and MySQL
driver given (``--driver pymysql --driver mysqldb``: the same database
through each, as SERVER+DRIVER), in reverse order every other round;
medians over the rounds. The machine's
other load during each run (CPU time of every process outside the server
and wrk) is recorded beside it.

    apt-get install -y wrk
    .venv/bin/python tools/bench/wrk_serve.py --db mysql --rounds 3 \\
        --out tools/bench/results/wrk-serve-$(git rev-parse --short HEAD).json
"""

import argparse
import json
import operator
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import sqlalchemy as sa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures_file  # noqa: E402
import procfs  # noqa: E402
import profile_request  # noqa: E402

from placement import conf as placement_conf  # noqa: E402

HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "content-type": "application/json",
    "openstack-api-version": "placement 1.39",
}
PROVIDER = "c0ffee00-0000-4000-8000-000000000001"
# Claims land on a provider of their own: the one read keeps one allocation.
CLAIMED = "c0ffee00-0000-4000-8000-000000000002"
CONSUMER = "c0ffee00-0000-4000-8000-0000000000c1"
PROJECT = "c0ffee00-0000-4000-8000-0000000000a1"
REQUESTS = {
    "GET /": "/",
    "GET /resource_providers/{uuid}": "/resource_providers/" + PROVIDER,
    "GET /resource_providers/{uuid}/allocations": (
        "/resource_providers/%s/allocations" % PROVIDER
    ),
    "GET /resource_providers/{uuid}/inventories": (
        "/resource_providers/%s/inventories" % PROVIDER
    ),
    "GET /resource_providers/{uuid}/traits": "/resource_providers/%s/traits" % PROVIDER,
}
CLAIM = "claim (candidates GET + PUT)"
# A script's request counter, and the uuid prefix of the run (its first
# argument).
LUA_HEAD = """
local n = 0
local prefix = ""
local headers = %(headers)s
init = function(args)
  prefix = args[1]
end
"""
# wrk alternates a claim's candidate GET and its PUT; every PUT claims
# for a new consumer, a counter in its uuid.
CLAIM_LUA = (
    LUA_HEAD
    + """
request = function()
  n = n + 1
  if n %% 2 == 1 then
    return wrk.format("GET", "/allocation_candidates?resources=VCPU:1&limit=1",
                      headers)
  end
  local consumer = prefix .. string.format("%%012x", n)
  local body = '{"allocations": {"%(provider)s": {"resources": {"VCPU": 1}}}, '
    .. '"project_id": "%(project)s", "user_id": "%(project)s", '
    .. '"consumer_generation": null, "consumer_type": "INSTANCE"}'
  return wrk.format("PUT", "/allocations/" .. consumer, headers, body)
end
"""
)
REGISTER = "registration (POST provider + PUT inventories + PUT traits)"
# A host's registration, one request at a time (one connection: each
# request needs the one before answered): a new provider, its
# inventories (generation 0), its traits (generation 1).
REGISTER_LUA = (
    LUA_HEAD
    + """
request = function()
  n = n + 1
  local step = n %% 3
  local provider = prefix .. string.format("%%012x", math.floor((n + 2) / 3))
  if step == 1 then
    return wrk.format("POST", "/resource_providers", headers,
      '{"name": "' .. provider .. '", "uuid": "' .. provider .. '"}')
  end
  local path = "/resource_providers/" .. provider
  if step == 2 then
    return wrk.format("PUT", path .. "/inventories", headers,
      '{"resource_provider_generation": 0, "inventories": '
      .. '{"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}}}')
  end
  return wrk.format("PUT", path .. "/traits", headers,
    '{"resource_provider_generation": 1, "traits": '
    .. '["HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "COMPUTE_NET_ATTACH_INTERFACE"]}')
end
"""
)


def _call(base, method, path, body=None):
    request = urllib.request.Request(
        base + path,
        method=method,
        headers=HEADERS,
        data=json.dumps(body).encode() if body is not None else None,
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()
    except urllib.error.HTTPError as e:
        sys.exit("%s %s: %d %s" % (method, path, e.code, e.read().decode()))


def seed(base):
    """The provider read, with one consumer's allocation, and the one
    claimed from, with room for every claim of every run."""
    for name, uuid_, inventories in (
        ("bench", PROVIDER, {"MEMORY_MB": {"total": 1_000_000}}),
        ("claimed", CLAIMED, {"VCPU": {"total": 10_000_000, "max_unit": 1}}),
    ):
        _call(base, "POST", "/resource_providers", {"name": name, "uuid": uuid_})
        _call(
            base,
            "PUT",
            "/resource_providers/%s/inventories" % uuid_,
            {"resource_provider_generation": 0, "inventories": inventories},
        )
    _call(
        base,
        "PUT",
        "/allocations/" + CONSUMER,
        {
            "allocations": {PROVIDER: {"resources": {"MEMORY_MB": 64}}},
            "project_id": PROJECT,
            "user_id": PROJECT,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )


def run_wrk(base, pgid, path, duration, script=None, connections=4):
    """One wrk run against ``path``: requests/s, server CPU ms per request,
    wrk's latency p50/p99 (ms), and the other processes' CPU (cores)."""
    argv = ["wrk", "-t1", "-c%d" % connections, "-d%ds" % duration, "--latency"]
    if script:
        argv += ["-s", script]
    else:
        for name, value in HEADERS.items():
            argv += ["-H", "%s: %s" % (name, value)]
    started = time.monotonic()
    pids = [pid for pid, _ in procfs.group(pgid)]
    switched = procfs.switches(pids)
    cpu, busy = procfs.group_cpu(pgid), procfs.machine_busy()
    argv.append(base + path)
    if script:
        # Each run's consumers are new: a uuid prefix of its own.
        argv += ["--", str(uuid.uuid4())[:24]]
    wrk = subprocess.run(argv, capture_output=True, text=True)
    server_cpu = procfs.group_cpu(pgid) - cpu
    others = procfs.machine_busy() - busy - server_cpu
    voluntary, involuntary = map(operator.sub, procfs.switches(pids), switched)
    wall = time.monotonic() - started
    out = wrk.stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests": total,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "server_cpu_ms": server_cpu * 1000 / total,
        "voluntary_switches": voluntary / total,
        "involuntary_switches": involuntary / total,
        "p50_ms": _latency(out, "50%"),
        "p99_ms": _latency(out, "99%"),
        # wrk itself and everyone else on the machine, in cores.
        "other_cpu_cores": others / wall,
    }


def _latency(out, percentile):
    value, unit = re.search(percentile + r"\s+([\d.]+)(us|ms|s)", out).groups()
    return float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit]


def one_server(url, name, duration, scripts, wanted):
    """The ``wanted`` requests' wrk runs against a fresh placement-api
    ``name``."""
    with profile_request.server(url, 1, 4, 2, http_server=name) as (base, pgid):
        found = {}
        for label, path in REQUESTS.items():
            if label in wanted:
                run_wrk(base, pgid, path, 1)  # warm up
                found[label] = run_wrk(base, pgid, path, duration)
        if CLAIM in wanted:
            claim = run_wrk(base, pgid, "/", duration, scripts[CLAIM])
            # Two requests a claim.
            for key in ("server_cpu_ms", "voluntary_switches", "involuntary_switches"):
                claim[key] *= 2
            claim["requests_per_s"] /= 2
            found[CLAIM] = claim
        if REGISTER in wanted:
            # Per request (of three a host).
            found[REGISTER] = run_wrk(base, pgid, "/", duration, scripts[REGISTER], 1)
    return found


def _python_path(path):
    """The servers started next import placement from ``path``."""
    if path:
        os.environ["PYTHONPATH"] = path
    else:
        os.environ.pop("PYTHONPATH", None)


def _through(url, driver):
    """``url`` through the MySQL ``driver`` (None: its own)."""
    if driver is None:
        return url
    through = sa.engine.make_url(url).set(drivername="mysql+" + driver)
    return through.render_as_string(hide_password=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "mysql"), default="mysql")
    parser.add_argument(
        "--server", action="append", help="placement-api --server (default: all)"
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        help="LABEL=DIR: also run placement from DIR, as SERVER@LABEL",
    )
    parser.add_argument(
        "--driver",
        action="append",
        choices=("pymysql", "mysqldb"),
        help="--db mysql through this driver, as SERVER+DRIVER (default: the URL's)",
    )
    parser.add_argument(
        "--request",
        action="append",
        choices=(*REQUESTS, CLAIM, REGISTER),
        help="run only these (default: every one)",
    )
    parser.add_argument(
        "--close",
        action="store_true",
        help="a new connection per request (Connection: close), as the shared"
        " bench's client",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8, help="seconds per run")
    parser.add_argument("--out", help="write the raw results here (JSON)")
    args = parser.parse_args()
    if args.close:
        HEADERS["connection"] = "close"
    trees = [("", os.environ.get("PYTHONPATH"))]
    trees += [tuple(tree.split("=", 1)) for tree in args.tree]
    runs = {}  # what each run is named: its server and PYTHONPATH
    for label, path in trees:
        for server in args.server or ["gunicorn", "granian"]:
            for driver in args.driver or [None]:
                name = server + ("+" + driver if driver else "")
                name += "@" + label if label else ""
                runs[name] = (server, path, driver)
    servers = list(runs)
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [], default_config_files=[])
    lua_headers = "{%s}" % ", ".join('["%s"] = "%s"' % kv for kv in HEADERS.items())
    with (
        tempfile.NamedTemporaryFile("w", suffix=".lua") as script,
        tempfile.NamedTemporaryFile("w", suffix=".lua") as register,
        profile_request.fresh_database(args.db, conf) as (url, db),
    ):
        script.write(
            CLAIM_LUA
            % {
                "headers": lua_headers,
                "provider": CLAIMED,
                "project": PROJECT,
            }
        )
        script.flush()
        register.write(REGISTER_LUA % {"headers": lua_headers})
        register.flush()
        db.engine.dispose()
        with profile_request.server(url, 1, 4, 2) as (base, _):
            seed(base)
        rounds = []
        for number in range(args.rounds):
            found = {}
            # Each run first in turn: claims grow the database as it goes.
            order = list(runs.items())
            for name, (server, path, driver) in order[:: -1 if number % 2 else 1]:
                _python_path(path)
                through = _through(url, driver)
                found[name] = one_server(
                    through,
                    server,
                    args.duration,
                    {CLAIM: script.name, REGISTER: register.name},
                    args.request or (*REQUESTS, CLAIM, REGISTER),
                )
            rounds.append(found)
            print("round %d: %s" % (number + 1, json.dumps(rounds[-1])), flush=True)
    medians = {
        name: {
            label: {
                key: statistics.median(r[name][label][key] for r in rounds)
                for key in rounds[0][name][label]
            }
            for label in rounds[0][name]
        }
        for name in servers
    }
    print(
        "medians over %d rounds (server CPU ms and voluntary switches per"
        " request, req/s):" % args.rounds
    )
    for name in servers:
        for label, m in medians[name].items():
            print(
                "  %-14s %-46s %.3f ms  %4.1f sw  %7.0f/s  p99 %.1f ms"
                "  others %.2f cores"
                % (
                    name,
                    label,
                    m["server_cpu_ms"],
                    m["voluntary_switches"],
                    m["requests_per_s"],
                    m["p99_ms"],
                    m["other_cpu_cores"],
                )
            )
    figures_file.write(
        args.out,
        {
            "db": args.db,
            "duration_s": args.duration,
            "trees": dict(trees),
            "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
            "rounds": rounds,
            "medians": medians,
        },
    )


if __name__ == "__main__":
    main()
