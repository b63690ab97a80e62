"""The library's layout rules: only kafka_archive.airflow (and the CLI, lazily) imports
Airflow, so the Spark job, the formats and the audit import fast from plain Python and on
executors; and no package imports another in a cycle."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import kafka_archive

PACKAGE = Path(kafka_archive.__file__).parent
MODULES = sorted(m.name for m in pkgutil.walk_packages(kafka_archive.__path__, "kafka_archive."))
AIRFLOW_FREE = [m for m in MODULES if not m.startswith("kafka_archive.airflow")]


def test_only_the_airflow_package_imports_airflow():
    code = ("import sys\n"
            f"for name in {AIRFLOW_FREE!r}:\n"
            "    __import__(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow')[:5])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def internal_imports(module: str) -> set[str]:
    """The kafka_archive modules `module` imports at its top level (not inside functions)."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    source = (path / "__init__.py") if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kafka_archive"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kafka_archive")}
    return found - {module}


def test_no_import_cycles():
    graph = {m: internal_imports(m) for m in MODULES}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", " -> ".join(path + [module])
        state[module] = "open"
        for imported in graph.get(module, ()):
            visit(imported, path + [module])
        state[module] = "done"

    for module in MODULES:
        visit(module, [])
