"""Run a list of nova's functional tests, unchanged, against this tree's
placement, and write each test's outcome as JSON.

Run with .venv-nova's python (tools/ensure-nova-venv makes it), from
anywhere:

    .venv-nova/bin/python tools/nova/run.py [--tests FILE] [--concurrency N]
        [--json OUT]

``--tests``: one nova test id per line (default tools/nova/tests.txt);
the tests run from nova's unpacked sdist with stestr, in parallel, under
eventlet and failing on leaked greenlets, as nova's own ``tox -e
functional`` runs them. Prints one line per test and a closing count;
exit status 1 unless every test passed. ``--json``: {test id: {"status":
"success" | "fail" | "skip" | ..., "seconds": ..., "details": text}} for
tests/functional/test_nova.py.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import subunit
import testtools

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# As nova's tox.ini sets them for its functional tests.
ENVIRONMENT = {
    "OS_NOVA_DISABLE_EVENTLET_PATCHING": "False",
    "NOVA_RAISE_ON_GREENLET_LEAK": "True",
    "OS_TEST_TIMEOUT": "160",
    "OS_STDOUT_CAPTURE": "1",
    "OS_STDERR_CAPTURE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "LANGUAGE": "en_US",
}


def nova_source():
    """The unpacked sdist nova is installed from (editable)."""
    found = glob.glob(os.path.join(ROOT, ".venv-nova", "src", "nova-*", "nova"))
    if len(found) != 1:
        sys.exit("no nova sdist under .venv-nova/src: run tools/ensure-nova-venv")
    return os.path.dirname(found[0])


def run(tests, concurrency):
    """{test id: outcome} of running ``tests`` (a file of ids)."""
    source = nova_source()
    stestr = [
        os.path.join(os.path.dirname(sys.executable), "stestr"),
        "--test-path=./nova/tests/functional",
        "--top-dir=./",
    ]
    env = dict(os.environ, **ENVIRONMENT)
    # A repository of its own in the sdist: stestr keeps its runs there.
    if not os.path.isdir(os.path.join(source, ".stestr")):
        subprocess.run(stestr + ["init"], cwd=source, env=env, check=True)
    command = stestr + [
        "run",
        "--subunit",
        "--concurrency=%d" % concurrency,
        "--load-list=%s" % os.path.abspath(tests),
    ]
    process = subprocess.Popen(command, cwd=source, env=env, stdout=subprocess.PIPE)
    outcomes = {}

    def record(test):
        if test["status"] in ("exists", "inprogress"):
            return
        start, stop = (test["timestamps"] + [None, None])[:2]
        details = "\n".join(
            "%s: %s" % (name, content.as_text())
            for name, content in test["details"].items()
            if name in ("traceback", "reason")
        )
        outcomes[test["id"]] = {
            "status": test["status"],
            "seconds": (stop - start).total_seconds() if start and stop else None,
            "details": details,
        }
        print(
            "%s %s" % (test["id"], test["status"]),
            file=sys.stderr,
            flush=True,
        )

    stream = subunit.ByteStreamToStreamResult(process.stdout, non_subunit_name="stdout")
    result = testtools.StreamToDict(record)
    result.startTestRun()
    stream.run(result)
    result.stopTestRun()
    process.wait()
    return outcomes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default=os.path.join(HERE, "tests.txt"))
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json")
    args = parser.parse_args()
    wanted = [line.strip() for line in open(args.tests) if line.strip()]
    outcomes = run(args.tests, args.concurrency)
    for test in wanted:
        outcomes.setdefault(
            test, {"status": "not run", "seconds": None, "details": "not run"}
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(outcomes, out, indent=1, sort_keys=True)
    passed = sum(outcomes[t]["status"] == "success" for t in wanted)
    print(
        "nova: %d passed, %d failed" % (passed, len(wanted) - passed),
        file=sys.stderr,
    )
    return 0 if passed == len(wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
