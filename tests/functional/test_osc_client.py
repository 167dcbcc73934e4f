"""The real OpenStack client (python-openstackclient + osc-placement)
against a live gunicorn server: every placement command group, at several
``--os-placement-api-version`` values and with the client's own default.

One server for the module. Commands run in batches (tests/functional/
osc_batch.py: one interpreter, a fresh ``OpenStackShell`` per command) to
keep the CLI's start-up cost bounded; one test runs the ``openstack``
executable itself.
"""

import json
import os
import shlex
import subprocess
import sys
import uuid

import pytest

from tests.functional import live_server

pytest.importorskip("osc_placement")

OPENSTACK = os.path.join(os.path.dirname(sys.executable), "openstack")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Only the command line configures the client: no OS_* settings or
# clouds.yaml choice leaks in from the environment.
CLIENT_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}


@pytest.fixture(scope="module")
def server():
    with live_server.gunicorn() as url:
        yield url


class Osc:
    def __init__(self, url):
        self.auth = [
            "--os-auth-type",
            "admin_token",
            "--os-token",
            "admin",
            "--os-endpoint",
            url,
        ]

    def batch(self, commands, version=None):
        """Run ``commands`` (strings, without ``openstack``); return their
        results in order: parsed JSON stdout, or "" for silent commands.
        A command prefixed with ``!`` must fail; its result is stderr.
        A ``(version, command)`` pair overrides ``version`` for one command
        (None: the client's default negotiation)."""
        argvs, expect_fail, versions = [], [], []
        for command in commands:
            cmd_version = version
            if isinstance(command, tuple):
                cmd_version, command = command
            expect_fail.append(command.startswith("!"))
            versions.append(cmd_version)
            argv = list(self.auth)
            if cmd_version:
                argv += ["--os-placement-api-version", cmd_version]
            argvs.append(argv + shlex.split(command.lstrip("!")))
        outputs = self._run(argvs, versions)
        results = []
        for command, fail, res in zip(commands, expect_fail, outputs):
            if fail:
                assert res["rc"] != 0, (command, res)
                results.append(res["stderr"])
                continue
            assert res["rc"] == 0, (command, res["stderr"])
            out = res["stdout"].strip()
            results.append(json.loads(out) if out else "")
        return results

    @staticmethod
    def _run(argvs, versions):
        """One interpreter per version, run side by side: the client keeps
        the negotiated version in process-wide state, so versions must not
        share one."""
        procs = {}
        for v in dict.fromkeys(versions):
            procs[v] = subprocess.Popen(
                [sys.executable, "-m", "tests.functional.osc_batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=CLIENT_ENV,
            )
        outs = {}
        for v, proc in procs.items():
            mine = [a for a, av in zip(argvs, versions) if av == v]
            stdout, _ = proc.communicate(json.dumps(mine), timeout=240)
            assert proc.returncode == 0, stdout
            outs[v] = iter(json.loads(stdout))
        return [next(outs[v]) for v in versions]

    def per_version(self, versions, make_commands):
        """One batch running ``make_commands(version)`` at each version;
        {version: its results}."""
        commands = {v: make_commands(v) for v in versions}
        results = iter(self.batch([(v, c) for v in versions for c in commands[v]]))
        return {v: [next(results) for _ in commands[v]] for v in versions}


@pytest.fixture(scope="module")
def osc(server):
    return Osc(server)


def uid():
    return str(uuid.uuid4())


def by_key(rows, key):
    return {row[key]: row for row in rows}


def test_resource_providers(osc):
    ids = {}

    def commands(version):
        root, child = ids[version] = uid(), uid()
        parent = "--parent-provider %s" % root if version != "1.0" else ""
        return [
            "resource provider create --uuid %s rp-%s -f json" % (root, root),
            "resource provider create --uuid %s %s child-%s -f json"
            % (child, parent, child),
            "resource provider list --name rp-%s -f json" % root,
            "resource provider show %s -f json" % child,
            "resource provider set --name renamed-%s %s %s -f json"
            % (child, parent, child),
            "resource provider delete %s" % child,
            "!resource provider show %s -f json" % child,
            "resource provider delete %s" % root,
        ]

    runs = osc.per_version(["1.0", "1.14", "1.39", None], commands)
    for version, results in runs.items():
        root, child = ids[version]
        created, child_created, listed, shown, renamed, deleted, gone, _ = results
        assert created["uuid"] == root
        assert created["name"] == "rp-%s" % root
        assert created["generation"] == 0
        assert [r["uuid"] for r in listed] == [root]
        assert shown["name"] == "child-%s" % child
        assert renamed["name"] == "renamed-%s" % child
        assert deleted == ""
        assert "No resource provider with uuid %s found" % child in gone
        if version == "1.0":
            assert set(created) == {"uuid", "name", "generation"}
            continue
        assert created["root_provider_uuid"] == root
        assert created["parent_provider_uuid"] is None
        assert child_created["parent_provider_uuid"] == root
        assert shown["root_provider_uuid"] == root
        assert renamed["parent_provider_uuid"] == root


def test_provider_tree_and_in_tree(osc):
    root, mid, leaf = uid(), uid(), uid()
    results = osc.batch(
        [
            "resource provider create --uuid %s tree-root-%s -f json" % (root, root),
            "resource provider create --uuid %s --parent-provider %s tree-mid-%s"
            " -f json" % (mid, root, mid),
            "resource provider create --uuid %s --parent-provider %s tree-leaf-%s"
            " -f json" % (leaf, mid, leaf),
            "resource provider list --in-tree %s -f json" % leaf,
            "!resource provider delete %s" % root,
            "resource provider delete %s" % leaf,
            "resource provider delete %s" % mid,
            "resource provider delete %s" % root,
        ],
        version="1.14",
    )
    tree = by_key(results[3], "uuid")
    assert set(tree) == {root, mid, leaf}
    assert {r["root_provider_uuid"] for r in tree.values()} == {root}
    assert tree[leaf]["parent_provider_uuid"] == mid
    assert "It has child resource providers. (HTTP 409)" in results[4]


def test_inventories(osc):
    ids = {}

    def commands(version):
        rp = ids[version] = uid()
        return [
            "resource provider create --uuid %s inv-%s -f json" % (rp, rp),
            "resource provider inventory set %s --resource VCPU=8"
            " --resource VCPU:allocation_ratio=4.0"
            " --resource MEMORY_MB=4096 --resource MEMORY_MB:reserved=512"
            " --resource DISK_GB=50 -f json" % rp,
            # class set replaces one existing class's record.
            "resource provider inventory class set %s DISK_GB --total 100"
            " --max_unit 50 --step_size 10 -f json" % rp,
            "resource provider inventory list %s -f json" % rp,
            "resource provider inventory show %s MEMORY_MB -f json" % rp,
            "resource provider inventory delete %s --resource-class VCPU" % rp,
            "resource provider inventory list %s -f json" % rp,
            "resource provider show %s -f json" % rp,
            "resource provider delete %s" % rp,
        ]

    for results in osc.per_version(["1.0", "1.5", "1.39"], commands).values():
        _, inv_set, class_set, listed, shown, deleted, after, rp, _ = results
        by_class = by_key(inv_set, "resource_class")
        assert by_class["VCPU"]["total"] == 8
        assert by_class["VCPU"]["allocation_ratio"] == 4.0
        assert by_class["MEMORY_MB"]["reserved"] == 512
        assert class_set["total"] == 100
        assert class_set["max_unit"] == 50
        assert class_set["step_size"] == 10
        assert set(by_key(listed, "resource_class")) == {"VCPU", "MEMORY_MB", "DISK_GB"}
        assert shown["total"] == 4096 and shown["reserved"] == 512
        assert deleted == ""
        assert set(by_key(after, "resource_class")) == {"MEMORY_MB", "DISK_GB"}
        # Created at 0; one bump each for the set, class set and delete.
        assert rp["generation"] == 3


def test_aggregates(osc):
    ids = {}

    def commands(version):
        rp, agg1, agg2 = ids[version] = uid(), uid(), uid()
        # 1.19+: the client sends the generation it was given.
        gen = "--generation %d" if version != "1.1" else ""
        return [
            "resource provider create --uuid %s agg-%s -f json" % (rp, rp),
            "resource provider aggregate set %s --aggregate %s --aggregate %s"
            " %s -f json" % (rp, agg1, agg2, gen % 0 if gen else ""),
            "resource provider aggregate list %s -f json" % rp,
            ("!" if gen else "") + "resource provider aggregate set %s"
            " --aggregate %s %s -f json" % (rp, agg1, gen % 0 if gen else ""),
            "resource provider delete %s" % rp,
        ]

    for version, results in osc.per_version(["1.1", "1.19", "1.39"], commands).items():
        rp, agg1, agg2 = ids[version]
        _, set_, listed, again, _ = results
        assert {r["uuid"] for r in set_} == {agg1, agg2}
        assert {r["uuid"] for r in listed} == {agg1, agg2}
        if version == "1.1":
            assert {r["uuid"] for r in again} == {agg1}
        else:
            # A stale generation is refused.
            assert "(HTTP 409)" in again


def test_resource_classes(osc):
    names = {}

    def commands(version):
        name = names[version] = "CUSTOM_OSC_%s" % uuid.uuid4().hex[:8].upper()
        idempotent = (
            ["resource class set %s" % name, "resource class set %s" % name]
            if version != "1.2"
            else []
        )
        return (
            [
                "resource class create %s" % name,
                "resource class list -f json",
                "resource class show %s -f json" % name,
            ]
            + idempotent
            + [
                "resource class delete %s" % name,
                "!resource class show %s -f json" % name,
            ]
        )

    for version, results in osc.per_version(["1.2", "1.7", "1.39"], commands).items():
        name = names[version]
        assert name in {r["name"] for r in results[1]}
        assert "VCPU" in {r["name"] for r in results[1]}
        assert results[2] == {"name": name}
        assert "(HTTP 404)" in results[-1]


def test_traits(osc):
    ids = {}

    def commands(version):
        rp = uid()
        trait = ids[version] = "CUSTOM_OSC_%s" % uuid.uuid4().hex[:8].upper()
        return [
            "trait create %s" % trait,
            "trait list --name startswith:CUSTOM_OSC_ -f json",
            "trait show %s -f json" % trait,
            "resource provider create --uuid %s trait-%s -f json" % (rp, rp),
            "resource provider trait set %s --trait %s --trait HW_CPU_X86_AVX2"
            " -f json" % (rp, trait),
            "resource provider trait list %s -f json" % rp,
            "!trait delete %s" % trait,
            "resource provider trait delete %s" % rp,
            "resource provider trait list %s -f json" % rp,
            "trait delete %s" % trait,
            "!trait show %s -f json" % trait,
            "resource provider delete %s" % rp,
        ]

    for version, results in osc.per_version(["1.6", "1.39", None], commands).items():
        trait = ids[version]
        assert trait in {r["name"] for r in results[1]}
        assert results[2] == {"name": trait}
        assert {r["name"] for r in results[4]} == {trait, "HW_CPU_X86_AVX2"}
        assert {r["name"] for r in results[5]} == {trait, "HW_CPU_X86_AVX2"}
        assert "(HTTP 409)" in results[6]
        assert results[8] == []
        assert "(HTTP 404)" in results[10]


def test_allocations_and_usages(osc):
    ids = {}

    def commands(version):
        rp1, rp2, consumer, project, user = ids[version] = (
            uid(),
            uid(),
            uid(),
            uid(),
            uid(),
        )
        setup = []
        for rp in (rp1, rp2):
            setup += [
                "resource provider create --uuid %s alloc-%s -f json" % (rp, rp),
                "resource provider inventory set %s --resource VCPU=8"
                " --resource MEMORY_MB=2048 -f json" % rp,
            ]
        return setup + [
            "resource provider allocation set %s"
            " --allocation rp=%s,VCPU=2,MEMORY_MB=512"
            " --allocation rp=%s,VCPU=1"
            " --project-id %s --user-id %s %s -f json"
            % (
                consumer,
                rp1,
                rp2,
                project,
                user,
                # 1.38+: the client requires a consumer type.
                "--consumer-type INSTANCE" if version == "1.39" else "",
            ),
            "resource provider allocation show %s -f json" % consumer,
            "resource provider usage show %s -f json" % rp1,
            "resource usage show %s --user-id %s -f json" % (project, user),
            "resource provider allocation unset %s --provider %s -f json"
            % (consumer, rp2),
            "resource provider allocation show %s -f json" % consumer,
            "!resource provider delete %s" % rp1,
            "resource provider allocation delete %s" % consumer,
            "resource provider allocation show %s -f json" % consumer,
            "resource provider usage show %s -f json" % rp1,
            "resource provider delete %s" % rp1,
            "resource provider delete %s" % rp2,
        ]

    for version, results in osc.per_version(["1.12", "1.28", "1.39"], commands).items():
        rp1, rp2, consumer, project, user = ids[version]
        results = results[4:]
        set_ = by_key(results[0], "resource_provider")
        shown = by_key(results[1], "resource_provider")
        for allocs in (set_, shown):
            assert allocs[rp1]["resources"] == {"VCPU": 2, "MEMORY_MB": 512}
            assert allocs[rp2]["resources"] == {"VCPU": 1}
        assert shown[rp1]["project_id"] == project
        assert shown[rp1]["user_id"] == user
        usage = {r["resource_class"]: r["usage"] for r in results[2]}
        assert usage == {"VCPU": 2, "MEMORY_MB": 512}
        totals = {r["resource_class"]: r["usage"] for r in results[3]}
        if version == "1.39":
            # 1.38+: usages per consumer type (the client names the column
            # resource_class), with a consumer count.
            assert totals == {
                "INSTANCE": {"VCPU": 3, "MEMORY_MB": 512, "consumer_count": 1}
            }
        else:
            assert totals == {"VCPU": 3, "MEMORY_MB": 512}
        assert set(by_key(results[4], "resource_provider")) == {rp1}
        assert set(by_key(results[5], "resource_provider")) == {rp1}
        assert "(HTTP 409)" in results[6]
        assert results[8] == []
        assert {r["usage"] for r in results[9]} == {0}


def test_allocation_candidates_with_groups(osc):
    root, numa0, numa1 = uid(), uid(), uid()
    trait = "CUSTOM_OSC_AC_%s" % uuid.uuid4().hex[:8].upper()
    osc.batch(
        [
            "trait create %s" % trait,
            "resource provider create --uuid %s ac-root-%s -f json" % (root, root),
            "resource provider create --uuid %s --parent-provider %s ac-n0-%s"
            " -f json" % (numa0, root, numa0),
            "resource provider create --uuid %s --parent-provider %s ac-n1-%s"
            " -f json" % (numa1, root, numa1),
            "resource provider inventory set %s --resource DISK_GB=100 -f json" % root,
            "resource provider inventory set %s --resource VCPU=4"
            " --resource MEMORY_MB=1024 -f json" % numa0,
            "resource provider inventory set %s --resource VCPU=4"
            " --resource MEMORY_MB=1024 -f json" % numa1,
            "resource provider trait set %s --trait %s -f json" % (numa1, trait),
        ],
        version="1.39",
    )

    def commands(version):
        groups = (
            " --resource DISK_GB=10 --group 1 --resource VCPU=2"
            " --group 2 --resource VCPU=2"
        )
        return [
            "allocation candidate list %s --group-policy none -f json" % groups,
            "allocation candidate list %s --group-policy isolate -f json" % groups,
            "allocation candidate list --group 1 --resource VCPU=1"
            " --required %s --group-policy none -f json" % trait,
        ]

    def candidates(rows):
        """Our tree's candidates: [{provider: allocation}]."""
        out = {}
        for row in rows:
            out.setdefault(row["#"], {})[row["resource provider"]] = row["allocation"]
        return [c for c in out.values() if set(c) <= {root, numa0, numa1}]

    for version, (grouped, isolated, required) in osc.per_version(
        # osc-placement knows no version in 1.30-1.36.
        ["1.25", "1.29", "1.39"],
        commands,
    ).items():
        # The trait-filtered group fits one provider: fine at any version.
        assert [set(c) for c in candidates(required)] == [{numa1}]
        if version == "1.25":
            # Below 1.29 a request using two providers of a tree is dropped.
            assert candidates(grouped) == candidates(isolated) == []
            continue
        # none: both groups on one NUMA node (x2) or one on each (x2).
        assert len(candidates(grouped)) == 4
        # isolate: the two groups on different nodes only.
        iso = candidates(isolated)
        assert [set(c) for c in iso] == [{root, numa0, numa1}] * 2
    osc.batch(
        ["resource provider delete %s" % p for p in (numa0, numa1, root)]
        + ["trait delete %s" % trait],
        version="1.39",
    )


def test_default_negotiation_with_the_openstack_executable(osc, server):
    """The console script itself, with the client's default version."""
    rp = uid()
    run = [OPENSTACK] + osc.auth
    created = subprocess.run(
        run
        + ["resource", "provider", "create", "--uuid", rp, "exe-%s" % rp, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=CLIENT_ENV,
    )
    body = json.loads(created.stdout)
    assert body["uuid"] == rp and body["generation"] == 0
    # The client negotiates up past 1.14: the tree fields are printed.
    assert body["root_provider_uuid"] == rp
    listed = subprocess.run(
        run
        + [
            "--os-placement-api-version",
            "1.0",
            "resource",
            "provider",
            "list",
            "--uuid",
            rp,
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=CLIENT_ENV,
    )
    assert json.loads(listed.stdout) == [
        {"uuid": rp, "name": "exe-%s" % rp, "generation": 0}
    ]
    subprocess.run(
        run + ["resource", "provider", "delete", rp],
        capture_output=True,
        timeout=120,
        check=True,
        env=CLIENT_ENV,
    )
