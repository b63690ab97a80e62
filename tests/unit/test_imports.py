"""The library's layout rules: only kafka_archive.airflow (and the CLI, lazily) imports
Airflow, so the Spark job, the formats and the audit import fast from plain Python and on
executors; no package imports another in a cycle; and the stages are layers (LAYERS): a
module imports only from its own layer or below, inside functions too."""

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


# The stages, lowest first: a module imports only from its own layer or those below it,
# at the top of a file or inside a function alike. Names are kafka_archive's top-level
# modules and packages. formats sits under the base modules because it needs nothing but
# the errors, and config validates a group's format and parser against what formats has.
LAYERS = [
    {"errors", "retries"},
    {"formats"},                                  # bytes in, bytes out: codecs, parsers
    {"storage", "tokens", "brokers", "kafka_connection", "registry_connection", "layout", "config",
     "config_schema", "catalog", "manifest", "spark", "spark_connect",
     "progress_bars"},                            # base: where things are and how to reach them
    {"plan"},
    {"archive"},
    {"commit"},
    {"audit"},
    {"monitor"},
    {"tools"},
    {"airflow", "cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def stage_imports(source: str) -> list[tuple[int, str]]:
    """(line, top-level name) of every kafka_archive import in the source, wherever it is."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "kafka_archive":
            parts = node.module.split(".")
            found += [(node.lineno, parts[1])] if len(parts) > 1 else \
                [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names
                      if a.name.startswith("kafka_archive.")]
    return found


def upward_imports(source: str, where: str, stage: str) -> list[str]:
    return [f"{where}:{line} ({stage}, layer {RANK[stage]}, imports {name}, layer {RANK[name]})"
            for line, name in stage_imports(source) if RANK[name] > RANK[stage]]


def test_every_stage_has_a_layer():
    stages = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
              if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert stages == set(RANK)


def test_stages_only_import_downwards():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] != "__init__":
            found += upward_imports(path.read_text(), str(path.relative_to(PACKAGE.parent)),
                                    parts[0])
    assert not found, "imports up the layers:\n" + "\n".join(found)


def test_the_layer_check_sees_imports_inside_functions():
    source = ("from kafka_archive import formats, plan\n"
              "def write():\n    from kafka_archive.audit import reconcile\n"
              "    if True:\n        import kafka_archive.tools.cat\n")
    assert upward_imports(source, "archive/x.py", "archive") == [
        "archive/x.py:3 (archive, layer 4, imports audit, layer 6)",
        "archive/x.py:5 (archive, layer 4, imports tools, layer 8)"]
