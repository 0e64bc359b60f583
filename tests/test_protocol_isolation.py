"""The protocol package is sans-I/O: no sockets, no event loop, no threads, no coordinator.

Checked twice: statically, over every module's imports, and dynamically, in a fresh
interpreter that imports the package and then looks at what else got loaded.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import protocol

PACKAGE = Path(protocol.__file__).resolve().parent
ROOT = PACKAGE.parent
FORBIDDEN = {"coordinator", "trio", "kazoo", "socket", "asyncio", "threading", "structlog"}
MODULES = sorted(PACKAGE.rglob("*.py"))


def package_of(path: Path) -> str:
    """The package a module's relative imports start from (its own, for an __init__)."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, a module of `package`,
    dynamic ones (`__import__`, `importlib.import_module`) included."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level > len(parts):
                    found.append((node.lineno, f"<relative import beyond {package}>"))
                    continue
                base = ".".join(parts[:len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module
            found.append((node.lineno, name))
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("__import__", "import_module") and node.args:
                arg = node.args[0]
                name = arg.value if isinstance(arg, ast.Constant) else "<computed>"
                found.append((node.lineno, str(name)))
    return found


def test_the_package_has_modules_to_check():
    names = {p.relative_to(PACKAGE).as_posix() for p in MODULES}
    assert {"__init__.py", "codec.py", "framing.py", "requests.py", "consumer.py",
            "schemas/__init__.py"} <= names


def forbidden(found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(line, name) for line, name in found
            if name.split(".")[0] in FORBIDDEN or name.startswith("<")]


def test_the_checker_resolves_relative_imports():
    path = PACKAGE / "schemas" / "heartbeat.py"
    names = {name for _, name in imported_modules(path.read_text(), package_of(path))}
    assert "protocol.schema" in names  # `from ..schema import ...`


def test_the_checker_catches_every_form_of_import():
    source = (
        "import os, socket\n"
        "from trio import open_nursery\n"
        "import kazoo.client as kc\n"
        "from coordinator.store import bridge\n"
        "from .. import elsewhere\n"
        "def later():\n"
        "    import asyncio\n"
        "    importlib.import_module('threading')\n"
        "    __import__('structlog')\n"
    )
    bad = {name.split(".")[0] for _, name in forbidden(imported_modules(source, "protocol"))}
    assert bad == FORBIDDEN | {"<relative import beyond protocol>"}


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(PACKAGE).as_posix() for p in MODULES])
def test_no_module_imports_io_or_the_coordinator(path):
    bad = forbidden(imported_modules(path.read_text(encoding="utf-8"), package_of(path)))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_importing_the_package_loads_no_io_or_coordinator_modules():
    code = (
        "import json, sys\n"
        "import protocol, protocol.messages, protocol.codec, protocol.consumer\n"
        "import protocol.framing, protocol.requests, protocol.schemas\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('trio', 'kazoo', 'coordinator', 'structlog'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
