"""Instructions per unit of work, counted by valgrind's callgrind: the same
count for the same code whatever else the machine is doing, where CPU
time on this (shared, virtual) machine moves 20-50% between runs.

The command runs twice under callgrind, with ``{n}`` replaced by
``--small`` and by ``--large`` (e.g. the claims a ``profile_claims.py``
run makes); the difference of the two runs' instructions (every thread)
divided by the difference of ``n`` is the cost of one unit, start-up and
loading cancelled out. ``--tree LABEL=DIR`` (repeatable) runs the
command in DIR with DIR's ``placement`` imported (a ``git archive`` of
another commit, its ``.venv`` a link to this tree's), the two runs of a
tree side by side on the two cores:

    .venv/bin/python tools/bench/callgrind.py --tree base=/tmp/base \\
        --tree ours=. -- .venv/bin/python tools/bench/profile_claims.py \\
        --db mysql --claims {n}

A run is about 20x slower than without valgrind (a claim ~90 ms); the
instructions of threads that poll on a timer (the catalog follower)
grow with that slowness, so compare trees, not absolute figures with
figures taken without valgrind.
"""

import argparse
import concurrent.futures
import glob
import os
import subprocess
import sys
import tempfile


def instructions(tree, command, n, out_dir):
    """Instructions (Ir) of every thread of one run of ``command``."""
    prefix = os.path.join(out_dir, "run-%d" % n)
    argv = ["valgrind", "--tool=callgrind", "--separate-threads=yes"]
    argv.append("--callgrind-out-file=%s.%%p" % prefix)
    argv += [arg.replace("{n}", str(n)) for arg in command]
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit("%s failed in %s:\n%s" % (" ".join(argv), tree, done.stderr[-3000:]))
    total = 0
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            totals = [line for line in f if line.startswith("totals:")]
        total += sum(int(line.split()[1]) for line in totals)
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="LABEL=DIR")
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not any("{n}" in arg for arg in command):
        parser.error("the command needs {n}")
    for spec in args.tree:
        label, tree = spec.split("=", 1)
        tree = os.path.abspath(tree)
        with tempfile.TemporaryDirectory() as out_dir:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                runs = [
                    pool.submit(instructions, tree, command, n, out_dir)
                    for n in (args.small, args.large)
                ]
                small, large = (run.result() for run in runs)
        per_unit = (large - small) / (args.large - args.small)
        print("%s: %.2f M instructions per unit" % (label, per_unit / 1e6), flush=True)


if __name__ == "__main__":
    main()
