"""Run many ``openstack`` commands in one interpreter (the CLI takes ~2 s
to start; the commands themselves take milliseconds).

stdin: a JSON list of argv lists (without the leading ``openstack``).
stdout: a JSON list of {"rc", "stdout", "stderr"}, one per command. Each
command gets a fresh ``OpenStackShell``, exactly what the console script
runs.
"""

import contextlib
import io
import json
import sys

from openstackclient import shell


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = shell.OpenStackShell().run(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main():
    real_stdout = sys.stdout
    results = [run(argv) for argv in json.load(sys.stdin)]
    json.dump(results, real_stdout)


if __name__ == "__main__":
    main()
