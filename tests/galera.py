"""A throw-away MariaDB Galera cluster on this machine, for tests.

    python -m tests.galera start DIR [--nodes 3]   # prints one URL per node
    python -m tests.galera stop DIR

tools/run-tests starts one in the background while pytest collects and
points the tests at DIR (``PLACEMENT_TEST_GALERA_DIR``).

Each node is a ``mariadbd`` with its own datadir under DIR and its own SQL,
group communication (gcomm), incremental and state transfer ports on
127.0.0.1; it reads only its own option file (``--no-defaults`` for the
system's), so a MariaDB server already running on this machine is never
touched. Node 1 bootstraps the cluster, the others join one by one and
receive its state by rsync, which needs the servers to run as the ``mysql``
OS user (they drop to it when started as root). ``start`` returns once
``wsrep_cluster_size`` equals the node count on every node; ``stop``
terminates the servers it started (their pids are in DIR) and removes DIR.
"""

import argparse
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time

import pymysql

from tests import processes
from tests.ports import free_ports

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
STATE = "cluster"
FAILED = "failed"
START_TIMEOUT = 180
ATTEMPTS = 3


def available():
    return (
        os.path.exists(PROVIDER)
        and shutil.which("mariadbd", path=os.environ.get("PATH", "") + ":/usr/sbin")
        and shutil.which("rsync")
        and _mysql_user() is not None
    )


def _mysql_user():
    try:
        return pwd.getpwnam("mysql")
    except KeyError:
        return None


def _option_file(node_dir, n, ports, gcomm_ports, name):
    sql, gcomm, ist, sst = ports
    cluster = ",".join("127.0.0.1:%d" % p for p in gcomm_ports)
    return "\n".join(
        [
            "[mysqld]",
            "user=mysql",
            "datadir=%s/data" % node_dir,
            "socket=%s/mysqld.sock" % node_dir,
            "pid-file=%s/mysqld.pid" % node_dir,
            "log-error=%s/error.log" % node_dir,
            "tmpdir=%s/tmp" % node_dir,
            "port=%d" % sql,
            "bind-address=127.0.0.1",
            "character-set-server=utf8mb4",
            "collation-server=utf8mb4_bin",
            "max_connections=400",
            # Small and not flushed per commit: the other nodes hold every
            # committed write set, and the cluster lives for one test run.
            "innodb_buffer_pool_size=64M",
            "innodb_log_file_size=32M",
            "innodb_flush_log_at_trx_commit=0",
            "performance_schema=OFF",
            "skip-log-bin",
            "binlog_format=ROW",
            "default_storage_engine=InnoDB",
            "innodb_autoinc_lock_mode=2",
            "wsrep_on=ON",
            "wsrep_provider=%s" % PROVIDER,
            "wsrep_cluster_name=%s" % name,
            "wsrep_cluster_address=gcomm://%s" % cluster,
            "wsrep_node_name=node%d" % n,
            "wsrep_node_address=127.0.0.1:%d" % gcomm,
            "wsrep_provider_options="
            "gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;"
            "gcache.size=64M" % (gcomm, ist),
            "wsrep_sst_method=rsync",
            "wsrep_sst_receive_address=127.0.0.1:%d" % sst,
            "wsrep_slave_threads=2",
            "",
        ]
    )


def _connect(port, timeout=2):
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", connect_timeout=timeout
    )


def _status(port, variable):
    conn = _connect(port)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE %s", (variable,))
            row = cur.fetchone()
            return row[1] if row else None
    finally:
        conn.close()


def _wait(what, check, deadline, node_dir, proc=None):
    """Until ``check()``; RuntimeError at ``deadline``, or as soon as the
    node's process ``proc`` (if given) has exited."""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except pymysql.err.MySQLError:
            pass
        if proc is not None and proc.poll() is not None:
            break  # it gave up (a failed state transfer)
        time.sleep(0.5)
    log = os.path.join(node_dir, "error.log")
    tail = open(log).read()[-3000:] if os.path.exists(log) else ""
    raise RuntimeError("Galera: timed out waiting for %s\n%s" % (what, tail))


def _spawn(node_dir, extra=()):
    with open(os.path.join(node_dir, "stdout.log"), "ab") as out:
        proc = subprocess.Popen(
            [
                "mariadbd",
                "--defaults-file=%s/my.cnf" % node_dir,
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin"),
        )
    with open(os.path.join(node_dir, "server.pid"), "w") as f:
        f.write(str(proc.pid))
    return proc


def start(base, nodes=3):
    """Start a cluster of ``nodes`` under ``base``; the SQL URLs of its nodes
    (``mysql+pymysql://root@127.0.0.1:PORT``), node 1 first.

    A start that fails (a joiner's state transfer can lose its port to
    another process) is torn down and tried again on new ports, up to
    ATTEMPTS times; the last failure is raised."""
    for _ in range(ATTEMPTS - 1):
        try:
            return _start_once(base, nodes)
        except (RuntimeError, subprocess.CalledProcessError):
            _stop_servers(base)
            for entry in os.listdir(base):
                if entry.startswith("node"):
                    shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
    return _start_once(base, nodes)


def _start_once(base, nodes):
    user = _mysql_user()
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)  # the mysql user must reach its datadir
    ports = free_ports(4 * nodes)
    per_node = [ports[i * 4 : i * 4 + 4] for i in range(nodes)]
    gcomm_ports = [p[1] for p in per_node]
    name = "placement_test_%d" % os.getpid()
    node_dirs = []
    for n, node_ports in enumerate(per_node, 1):
        node_dir = os.path.join(base, "node%d" % n)
        for sub in ("data", "tmp"):
            os.makedirs(os.path.join(node_dir, sub), exist_ok=True)
        with open(os.path.join(node_dir, "my.cnf"), "w") as f:
            f.write(_option_file(node_dir, n, node_ports, gcomm_ports, name))
        for path in (node_dir, *(os.path.join(node_dir, s) for s in ("data", "tmp"))):
            os.chown(path, user.pw_uid, user.pw_gid)
        node_dirs.append(node_dir)
    urls = ["mysql+pymysql://root@127.0.0.1:%d" % p[0] for p in per_node]

    subprocess.run(
        [
            "mariadb-install-db",
            "--defaults-file=%s/my.cnf" % node_dirs[0],
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT
    _spawn(node_dirs[0], ["--wsrep-new-cluster"])
    first = per_node[0][0]
    _wait(
        "node 1 to bootstrap",
        lambda: _status(first, "wsrep_ready") == "ON",
        deadline,
        node_dirs[0],
    )
    # Joining one at a time: a donor sends one state transfer at once.
    for n in range(1, nodes):
        _spawn(node_dirs[n])
        port = per_node[n][0]
        _wait(
            "node %d to join" % (n + 1),
            lambda port=port: _status(port, "wsrep_ready") == "ON",
            deadline,
            node_dirs[n],
        )
    for n, node_ports in enumerate(per_node):
        _wait(
            "wsrep_cluster_size %d" % nodes,
            lambda port=node_ports[0]: (
                _status(port, "wsrep_cluster_size") == str(nodes)
            ),
            deadline,
            node_dirs[n],
        )
    # Written last: its presence says the cluster is ready.
    with open(os.path.join(base, STATE + ".tmp"), "w") as f:
        f.write("\n".join(urls) + "\n")
    os.rename(os.path.join(base, STATE + ".tmp"), os.path.join(base, STATE))
    return urls


def kill(base, n):
    """Kill node ``n`` (1 for the first) with SIGKILL, as a crash would, and
    reap it."""
    node_dir = os.path.join(base, "node%d" % n)
    with open(os.path.join(node_dir, "server.pid")) as f:
        pid = int(f.read())
    if not processes.signal_ours(pid, node_dir, signal.SIGKILL):
        raise RuntimeError("node %d (pid %d) is not running" % (n, pid))
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # started by another process


def rejoin(base, n, url, donor=None, timeout=START_TIMEOUT):
    """Start node ``n`` (SQL URL ``url``) again after a ``kill`` and return
    once it is synced with the cluster; ``donor`` names the node (``nodeN``)
    that sends it what it misses.

    As MariaDB's systemd unit does, the position the node's data reached is
    recovered first and given at start, so that the node asks for the
    write sets after it (IST) rather than a whole copy (SST)."""
    node_dir = os.path.join(base, "node%d" % n)
    log = os.path.join(node_dir, "recover.log")
    subprocess.run(
        [
            "mariadbd",
            "--defaults-file=%s/my.cnf" % node_dir,
            "--wsrep-recover",
            "--log-error=%s" % log,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin"),
    )
    with open(log) as f:
        found = re.findall(r"Recovered position: (\S+)", f.read())
    extra = ["--wsrep-start-position=%s" % found[-1]] if found else []
    if donor:
        extra.append("--wsrep-sst-donor=%s" % donor)
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    for attempt in range(ATTEMPTS):
        proc = _spawn(node_dir, extra)
        try:
            _wait(
                "node %d to rejoin" % n,
                lambda: _status(port, "wsrep_local_state_comment") == "Synced",
                deadline,
                node_dir,
                proc,
            )
            return
        except RuntimeError:
            if proc.poll() is None or attempt == ATTEMPTS - 1:
                raise
        # The node exited: its state transfer lost a port chosen at the
        # cluster's start to another process meanwhile (rsync could not
        # listen). It starts again on new transfer ports.
        _new_transfer_ports(node_dir)


def _new_transfer_ports(node_dir):
    """Give the node's incremental and state transfers new ports."""
    path = os.path.join(node_dir, "my.cnf")
    with open(path) as f:
        text = f.read()
    ist, sst = free_ports(2)
    text = re.sub(
        r"ist\.recv_addr=127\.0\.0\.1:\d+", "ist.recv_addr=127.0.0.1:%d" % ist, text
    )
    text = re.sub(
        r"wsrep_sst_receive_address=127\.0\.0\.1:\d+",
        "wsrep_sst_receive_address=127.0.0.1:%d" % sst,
        text,
    )
    with open(path, "w") as f:
        f.write(text)


def wait_for(base, timeout=START_TIMEOUT + 60):
    """The node URLs of the cluster ``start`` is bringing up under ``base``
    (possibly from another process) once it is ready; RuntimeError if the
    start failed or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(base, STATE)) as f:
                return f.read().split()
        except FileNotFoundError:
            pass
        if os.path.exists(os.path.join(base, FAILED)):
            with open(os.path.join(base, FAILED)) as f:
                raise RuntimeError("Galera cluster did not start:\n" + f.read())
        time.sleep(0.5)
    raise RuntimeError("Galera cluster under %s not ready in %ds" % (base, timeout))


def stop(base, keep=False):
    """Stop the servers started under ``base`` (last node first) and remove
    it (unless ``keep``)."""
    _stop_servers(base)
    if not keep:
        shutil.rmtree(base, ignore_errors=True)


def _stop_servers(base):
    node_dirs = sorted(
        (os.path.join(base, d) for d in os.listdir(base) if d.startswith("node")),
        reverse=True,
    )
    for node_dir in node_dirs:
        try:
            with open(os.path.join(node_dir, "server.pid")) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue
        # A stale file (a node killed before) may name another process now.
        if not processes.signal_ours(pid, node_dir, signal.SIGTERM):
            continue
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                # Not our child (started by another command): poll it.
                done = 0 if processes.is_ours(pid, node_dir) else pid
            if done:
                break
            time.sleep(0.2)
        else:
            processes.signal_ours(pid, node_dir, signal.SIGKILL)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("dir")
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)
    if args.action == "start":
        try:
            print(" ".join(start(args.dir, args.nodes)))
        except Exception as e:
            stop(args.dir, keep=True)
            with open(os.path.join(args.dir, FAILED), "w") as f:
                f.write(str(e))
            raise
    else:
        stop(args.dir)


if __name__ == "__main__":
    sys.exit(main())
