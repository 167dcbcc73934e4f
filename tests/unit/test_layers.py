"""Imports point one way: entry points -> api -> handlers -> objects -> db
(doc/architecture.md "Layers"). Every module under placement/ is parsed
(its imports read with ast, function-level ones included) and no module
may import from a layer above its own."""

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
        ("placement.cmd", "placement.wsgi", "placement.deploy", "placement.tests"),
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
            "placement.conf",
            "placement.context",
            "placement.error_codes",
            "placement.events",
            "placement.exception",
            "placement.policies",
            "placement.policy",
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
        ("placement.handlers.candidate_render", "handlers"),
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
