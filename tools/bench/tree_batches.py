"""Two code trees side by side in one run: a child process per tree
(``placement`` imported from it: PYTHONPATH=TREE) that prints a JSON
line ``{"ready": true}``, then runs a batch per ``batch`` line read and
prints its figures as one JSON line. The batches alternate between the
trees, which goes first swapped every round, so that a busy machine
slows both alike; the first round warms up and is not counted."""

import json
import os
import subprocess
import sys


def alternated(script, trees, child_args, batches):
    """({label: [each counted batch's figures]}, [load averages before,
    after]) of ``script --child TREE *child_args`` run for each of
    ``trees`` ({label: directory}) over ``batches`` rounds."""
    procs = {}
    for label, tree in trees.items():
        procs[label] = subprocess.Popen(
            [sys.executable, script, "--child", tree, *child_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=tree),
        )
        assert json.loads(procs[label].stdout.readline())["ready"]
    found = {label: [] for label in trees}
    load = [os.getloadavg()]
    order = list(trees)
    for round_ in range(batches + 1):
        for label in order:
            procs[label].stdin.write("batch\n")
            procs[label].stdin.flush()
            out = json.loads(procs[label].stdout.readline())
            if round_:
                found[label].append(out)
        order.reverse()
    load.append(os.getloadavg())
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    return found, load
