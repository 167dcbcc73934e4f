"""Count requests that fail on a reused keep-alive connection.

Clients that reuse their connection on a period close to the server's
keep-alive timeout (gunicorn's ``keepalive``, 2 s) race the server closing
it as idle. While a few threads keep the server busy, ``--periodic``
clients each send ``GET /`` about every ``--period`` seconds on their own
session for ``--seconds``; the script prints how many were answered and
how many failed with a connection error (reset or closed without answer).

    .venv/bin/placement-api --port 38111 --workers 1 --threads 10 &
    .venv/bin/python tools/bench/keepalive_race.py --port 38111
"""

import argparse
import random
import threading
import time

import requests

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--period", type=float, default=2.0)
    parser.add_argument("--periodic", type=int, default=40)
    parser.add_argument("--busy", type=int, default=6)
    args = parser.parse_args()
    base = "http://127.0.0.1:%d" % args.port
    stop = threading.Event()
    errors, answered = [], []

    def busy():
        session = requests.Session()
        while not stop.is_set():
            try:
                session.get(base + "/resource_providers", headers=HEADERS)
            except requests.RequestException:
                session = requests.Session()

    def periodic():
        session = requests.Session()
        while not stop.is_set():
            try:
                session.get(base + "/", headers=HEADERS)
                answered.append(1)
            except requests.RequestException as e:
                errors.append(repr(e))
                session = requests.Session()
            time.sleep(random.uniform(0.975, 1.025) * args.period)

    threads = [threading.Thread(target=busy) for _ in range(args.busy)]
    threads += [threading.Thread(target=periodic) for _ in range(args.periodic)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    print("answered %d, connection errors %d" % (len(answered), len(errors)))
    for error in sorted(set(errors)):
        print("  ", error[:160])


if __name__ == "__main__":
    main()
