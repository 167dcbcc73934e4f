"""Markdown table of bench results (side-by-side runs of tools/bench/compare).

    python3 tools/bench/table.py results.json [more.json ...]

One row per (scenario, figure, database): ours, the reference, and the gain
(reference/ours for times, ours/reference for rates), medians over the
runs in each file.
"""

import json
import re
import sys

FIGURES = {
    "flat": [
        ("load_s", "load 1000 providers (s)"),
        ("get_p50_s", "single GET p50 (s)"),
        ("tput_rps", "c=10 throughput (req/s)"),
        ("tput_p95_s", "c=10 p95 (s)"),
        ("tput_server_cpu_ms_per_req", "server CPU per request (ms)"),
    ],
    "nested": [
        ("load_s", "load 7000 providers (s)"),
        ("get_p50_s", "single GET p50 (s)"),
        ("tput_rps", "c=10 throughput (req/s)"),
        ("tput_p95_s", "c=10 p95 (s)"),
        ("tput_server_cpu_ms_per_req", "server CPU per request (ms)"),
    ],
    "wide": [("load_s", "load hosts x (1+8) providers (s)")],  # + _wide()
    "claims": [
        ("claims_per_s", "successful claims/s"),
        ("claim_p50_s", "claim p50, GET+PUT (s)"),
        ("claims_server_cpu_ms_per_claim", "server CPU per claim (ms)"),
        ("claims_ok", "claims acknowledged (800 fit)"),
        ("providers_over_capacity", "providers over capacity"),
        ("integrity", "integrity"),
    ],
    "rp-list": [
        ("load1_s", "create 1000 providers (s)"),
        ("list1000_p50_s", "GET /resource_providers 1000, p50 (s)"),
        ("load2_s", "create 6000 more (s)"),
        ("list7000_p50_s", "GET /resource_providers 7000, p50 (s)"),
    ],
}
RATES = ("_rps", "_per_s", "claims_ok")


def fmt(value):
    if isinstance(value, float):
        return "%.3g" % value
    return "-" if value is None else str(value)


def gain(key, ours, ref):
    if (
        not all(isinstance(v, (int, float)) for v in (ours, ref))
        or key in ("claims_ok", "providers_over_capacity")
        or not ours
        or not ref
    ):
        return ""
    return "%.1fx" % ((ours / ref) if key.endswith(RATES) else (ref / ours))


def _wide(figures):
    """The wide scenario's query timings, whatever its group counts and
    limit: gN_s and gN_limitL_s, by group count then limit."""
    found = []
    for key in figures:
        match = re.fullmatch(r"g(\d+)(?:_limit(\d+))?_s", key)
        if match:
            groups, limit = int(match[1]), match[2]
            found.append(
                (
                    (groups, int(limit or 0)),
                    key,
                    "%d group(s)%s (s)"
                    % (groups, ", limit=%s" % limit if limit else ""),
                )
            )
    return [(key, label) for _, key, label in sorted(found)]


def main(paths):
    print("| scenario | figure | db | ours | reference | gain |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            summary = json.load(f)["summary"]
        for scenario, per_db in summary.items():
            for db, figures in per_db.items():
                rows = list(FIGURES.get(scenario, ()))
                if scenario == "wide":
                    rows += _wide(figures)
                for key, label in rows:
                    if key not in figures:
                        continue
                    fig = figures[key]
                    ref = fig.get("upstream")
                    ours = fig.get("ours")
                    print(
                        "| %s | %s | %s | %s | %s | %s |"
                        % (
                            scenario,
                            label,
                            db,
                            fmt(ours),
                            fmt(ref),
                            gain(key, ours, ref),
                        )
                    )


if __name__ == "__main__":
    main(sys.argv[1:])
