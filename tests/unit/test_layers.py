"""Imports point one way: entry points -> api -> handlers -> objects -> db
(doc/architecture.md "Layers"). Every module under placement/ is parsed
(its imports read with ast, function-level ones included) and no module
may import from a layer above its own; nor may two packages import each
other, directly or round a longer loop, even within one layer."""

import ast
import pathlib

import pytest

import placement

ROOT = pathlib.Path(placement.__file__).parent

# Highest first. A module belongs to the first layer whose prefix matches
# its dotted name (a prefix matches the module and everything under it).
LAYERS = [
    # (placement.tests: what other projects' tests import to run the app.)
    (
        "entry",
        (
            "placement.cmd",
            "placement.wsgi",
            "placement.deploy",
            "placement.startup",
            "placement.tests",
        ),
    ),
    # The web application: pipeline, middleware, routes, OpenAPI, metrics
    # exposition.
    ("api", ("placement.api",)),
    ("handlers", ("placement.handlers",)),
    # The HTTP vocabulary handlers speak, below them and above the domain:
    # HTTP errors, request/response helpers, handler decorators, version
    # negotiation. They know nothing of routes or handlers.
    ("web", ("placement.web",)),
    ("objects", ("placement.objects",)),
    ("db", ("placement.db",)),
    # Leaves anyone may import; they import only each other.
    (
        "leaf",
        (
            "placement.arrival",
            "placement.conf",
            "placement.context",
            "placement.error_codes",
            "placement.events",
            "placement.exception",
            "placement.logformat",
            "placement.mmapvalues",
            "placement.policies",
            "placement.policy",
            "placement.procid",
            "placement.schemas",
            "placement.versions",
        ),
    ),
]
ORDER = ["entry", "api", "handlers", "web", "objects", "db", "leaf"]


def layer_of(name):
    """The layer of a dotted module name: the longest matching prefix."""
    best = None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (layer, prefix)
    return best[0] if best else None


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def imported(name, path):
    """Every placement module ``path`` imports (absolute names)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = parent + ("." + base if base else "")
            for alias in node.names:
                # "from placement.web import errors" imports the module
                # placement.web.errors; "from x import NAME" names x.
                candidate = base + "." + alias.name
                yield candidate if _is_module(candidate) else base


def _is_module(name):
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def upward_imports():
    found = []
    for name, path in modules():
        if name == "placement":
            continue  # the package's __init__: nothing but its docstring
        layer = layer_of(name)
        assert layer is not None, "%s belongs to no layer: add it to LAYERS" % name
        for target in imported(name, path):
            if target != "placement" and not target.startswith("placement."):
                continue
            target_layer = layer_of(target)
            if target_layer is None:
                continue  # the placement package itself
            if ORDER.index(target_layer) < ORDER.index(layer):
                found.append(
                    "%s (%s) imports %s (%s)" % (name, layer, target, target_layer)
                )
    return found


def test_no_module_imports_from_a_layer_above():
    assert upward_imports() == []


@pytest.mark.parametrize(
    "name,layer",
    [
        ("placement.api.app", "api"),
        ("placement.web.errors", "web"),
        ("placement.handlers.inventory", "handlers"),
        ("placement.handlers.candidates.render", "handlers"),
        ("placement.db.api", "db"),
        ("placement.schemas.allocation", "leaf"),
        ("placement.cmd.api", "entry"),
    ],
)
def test_layer_of(name, layer):
    assert layer_of(name) == layer


def test_an_upward_import_is_found(tmp_path, monkeypatch):
    """The check sees a function-level import of a higher layer."""
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    from placement.api import routes\n")
    assert list(imported("placement.objects.probe", module)) == ["placement.api.routes"]


# A loop between packages: each package (a directory below a layer's own)
# is one unit, and so is each module directly in a layer's package.
LAYER_PACKAGES = {prefix for _, prefixes in LAYERS for prefix in prefixes} | {
    "placement"
}


def unit_of(name, packages):
    """The unit ``name`` belongs to: its package, unless that is a layer's
    own (``packages``: every package's dotted name)."""
    package = name if name in packages else name.rpartition(".")[0]
    return name if package in LAYER_PACKAGES else package


def import_graph(extra=()):
    """{unit: the units it imports}, over every module under placement/ and
    ``extra`` ((name, path) of modules not in the tree)."""
    found = list(modules()) + list(extra)
    packages = {name for name, path in found if path.name == "__init__.py"}
    graph = {}
    for name, path in found:
        unit = unit_of(name, packages)
        for target in imported(name, path):
            if target.startswith("placement."):
                other = unit_of(target, packages)
                if other != unit:
                    graph.setdefault(unit, set()).add(other)
    return graph


def _reachable(graph, start):
    """The units ``start`` reaches by one import or more."""
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        unit = todo.pop()
        if unit not in seen:
            seen.add(unit)
            todo.extend(graph.get(unit, ()))
    return seen


def loops(graph):
    """Each set of units that import each other round a loop, sorted."""
    reach = {unit: _reachable(graph, unit) for unit in graph}
    found = {
        frozenset(other for other in reach[unit] if unit in reach.get(other, ()))
        for unit in graph
    }
    return sorted(sorted(loop) for loop in found if len(loop) > 1)


def test_no_import_loop_between_packages():
    assert loops(import_graph()) == []


def test_a_loop_between_packages_is_found(tmp_path):
    """The loop issue 34 removed: a catalog module importing the candidate
    engine, which imports the catalog."""
    module = tmp_path / "probe.py"
    module.write_text("from placement.objects.allocation_candidates import kept\n")
    graph = import_graph(extra=[("placement.objects.catalog.probe", module)])
    assert loops(graph) == [
        ["placement.objects.allocation_candidates", "placement.objects.catalog"]
    ]


def test_a_longer_loop_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert loops(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "name,unit",
    [
        ("placement.objects.capacity", "placement.objects.capacity"),
        ("placement.objects.catalog.store", "placement.objects.catalog"),
        ("placement.objects.catalog", "placement.objects.catalog"),
        ("placement.handlers.candidates.query", "placement.handlers.candidates"),
        ("placement.conf", "placement.conf"),
    ],
)
def test_unit_of(name, unit):
    packages = {name for name, path in modules() if path.name == "__init__.py"}
    assert unit_of(name, packages) == unit
