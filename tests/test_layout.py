"""The package's shape, as docs/ARCHITECTURE-style promises that a test keeps: imports flow one way (no cycles),
the trace child imports only what may run in the user's process, renderers and everything they read never open a
user's file, and each piece of Keras semantics is defined once."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "mpdoctor"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports_of(path: Path) -> set[str]:
    """The mpdoctor modules a module imports, at any depth of its code (function-level imports count: a cycle
    through them is still a cycle); `if TYPE_CHECKING:` blocks do not."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("mpdoctor")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mpdoctor") and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {name for name in found if name in MODULES}


@functools.cache
def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in imports_of(path) if target != name)
    return graph


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], "\n".join(" -> ".join([*cycle, cycle[0]]) for cycle in cycles)


def test_the_trace_child_imports_only_facts_and_artifact_readers():
    graph = import_graph()
    child = [name for name in MODULES if name.startswith("mpdoctor.trace.child")]
    # mpdoctor.writes: the one atomic writer (standard library only), which the checkpoint converter uses too.
    allowed = ("mpdoctor.trace.child", "mpdoctor.facts", "mpdoctor.artifacts", "mpdoctor._version", "mpdoctor.writes")
    reached = set().union(*(nx.descendants(graph, name) for name in child))
    assert sorted(name for name in reached if not name.startswith(allowed)) == []


def test_the_parent_side_never_imports_the_child_except_the_live_path_and_the_fork_server():
    """The fork server's process imports the child to fork it; its parent half imports nothing of it."""
    graph = import_graph()
    importers = {
        source
        for source, target in graph.edges
        if target.startswith("mpdoctor.trace.child") and not source.startswith("mpdoctor.trace.child")
    }
    assert importers <= {"mpdoctor.trace.live", "mpdoctor.trace.forkserver"}, importers


_FILE_READS = re.compile(r"\bopen\(|\.read_text\(|\.read_bytes\(|read_source\(|read_notebook\(|read_checked\(")


def test_renderers_and_what_they_read_never_open_a_users_file():
    """Everything a report is made from is in the Report: the renderers, fingerprints and baseline matching."""
    rendering = [name for name in MODULES if name.startswith("mpdoctor.report")] + ["mpdoctor.fingerprints"]
    offenders = []
    for name in rendering:
        for number, line in enumerate(MODULES[name].read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _FILE_READS.search(code) and "_template_dir()" not in code:  # the report's own templates
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


def _definitions(pattern: str) -> list[str]:
    regex = re.compile(pattern, re.MULTILINE)
    return [f"{name}" for name, path in MODULES.items() if regex.search(path.read_text(encoding="utf-8"))]


def test_keras_semantics_are_defined_once():
    semantics = ["mpdoctor.facts.keras_semantics"]
    # Model-class spellings, the legacy-Keras switch, autocast rules and the sublayer walk.
    assert _definitions(r"^\s*_?SEQUENTIAL\w* = ") == semantics
    assert _definitions(r'"keras\.models\.Sequential"') == semantics
    assert _definitions(r'\.get\(\s*("TF_USE_LEGACY_KERAS"|LEGACY_KERAS_ENV)') == semantics
    assert _definitions(r"^\s*LEGACY_KERAS_ENV = ") == semantics
    assert _definitions(r"^\s*_?NO_AUTOCAST\w* = ") == semantics
    assert _definitions(r"^def (autocasts_argument|autocast_flag)\b") == semantics
    assert _definitions(r"_flatten_layers\(") == semantics


def test_one_rule_is_one_module():
    """Each code is defined in one rule module, and no module outside the rules names a rule code in its logic
    (the registry, the engine and the trace checks go through the rules' hooks); MP001/MP002 belong to
    mp001_run, which registers them as what the engine raises (`raised_by_engine`, `unused_suppressions_check`)."""
    defined: dict[str, str] = {}
    for name, path in MODULES.items():
        for code in re.findall(r'define_rule\(\s*"(MP\d{3})"', path.read_text(encoding="utf-8")):
            assert code not in defined, f"{code} defined in {defined.get(code)} and {name}"
            defined[code] = name
    assert all(module.startswith("mpdoctor.rules.mp") for module in defined.values()), defined
    core = [
        "mpdoctor.engine",
        "mpdoctor.registry",
        "mpdoctor.trace.checks",
        "mpdoctor.trace.failures",
        "mpdoctor.trace.runner",
    ]
    for name in core:
        code = "\n".join(line.split("#", 1)[0] for line in MODULES[name].read_text(encoding="utf-8").splitlines())
        assert not re.findall(r'"MP\d{3}"', code), f"{name} names a rule code"


def test_the_engine_and_the_trace_import_no_rule_module():
    """They reach the rules through the registry's hooks only (the registry loads the rule modules itself)."""
    graph = import_graph()
    importers = ["mpdoctor.engine", *(name for name in MODULES if name.startswith("mpdoctor.trace"))]
    offenders = sorted(
        f"{name} -> {target}"
        for name in importers
        for target in graph.successors(name)
        if target.startswith("mpdoctor.rules")
    )
    assert offenders == []
