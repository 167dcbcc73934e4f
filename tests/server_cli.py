"""The command line of the servers tools/run-tests starts for the suite
(tests/private_mariadb.py, tests/private_postgresql.py):

    python -m tests.private_NAME start BASE   # prints its DIR and URL
    python -m tests.private_NAME stop DIR
"""

import argparse


def main(description, start, stop, argv=None):
    """``start(base)`` -> (its directory, its URL), the server detached;
    ``stop(directory)`` stops it and removes the directory."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("dir", help="start: where its directory is made; stop: it")
    args = parser.parse_args(argv)
    if args.action == "start":
        print(*start(args.dir))
    else:
        stop(args.dir)
    return 0
