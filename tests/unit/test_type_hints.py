"""The public functions and methods of placement/objects, placement/db and
placement/api carry type hints (parameters and return), so mypy, which
tools/run-tests runs over those packages, checks their bodies. Nested
functions (decorator wrappers, closures) and names starting with "_" are
not public."""

import ast
import pathlib

import placement

ROOT = pathlib.Path(placement.__file__).parent
PACKAGES = ("objects", "db", "api")
# Stages of the candidate engine not yet annotated.
PENDING: set[str] = set()


def _public_functions(tree):
    """Module-level functions and methods of module-level classes."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from (
                (node.name + "." + item.name, item)
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            )
        elif isinstance(node, ast.FunctionDef):
            yield node.name, node


def unannotated(source):
    """Names of the public functions of ``source`` missing a hint."""
    missing = []
    for name, fn in _public_functions(ast.parse(source)):
        if name.rpartition(".")[2].startswith("_"):
            continue
        params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        params = [p for p in params if p.arg not in ("self", "cls")]
        if fn.returns is None or any(p.annotation is None for p in params):
            missing.append(name)
    return missing


def test_public_functions_have_hints():
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative in PENDING:
                continue
            missing += [
                "%s: %s" % (relative, name) for name in unannotated(path.read_text())
            ]
    assert missing == []


def test_a_missing_hint_is_found():
    source = (
        "def typed(a: int) -> int: ...\n"
        "def untyped(a): ...\n"
        "def no_return(a: int): ...\n"
        "def _private(a): ...\n"
        "class C:\n"
        "    def method(self, b): ...\n"
        "    def __init__(self) -> None: ...\n"
    )
    assert unannotated(source) == ["untyped", "no_return", "C.method"]
