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


def imports_of(path: Path, type_checking: bool = True) -> set[str]:
    """The mpdoctor modules a module imports, at any depth of its code (function-level imports count: a cycle
    through them is still a cycle), and those of `if TYPE_CHECKING:` blocks unless `type_checking` is False (a
    type-only import is still a dependency of the module's meaning)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(n)
        for block in ast.walk(tree)
        if not type_checking and isinstance(block, ast.If) and _is_type_checking(block)
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
def import_graph(type_checking: bool = True) -> nx.DiGraph:
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in imports_of(path, type_checking) if target != name)
    return graph


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], "\n".join(" -> ".join([*cycle, cycle[0]]) for cycle in cycles)


# The layers, lowest first (as import-linter's `layers` contract): a module imports only from its own layer or those
# below, type-only imports included. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation: data and text, no analysis",
        (
            "mpdoctor._version", "mpdoctor.facts", "mpdoctor.printable", "mpdoctor.reads", "mpdoctor.writes",
            "mpdoctor.tf_messages", "mpdoctor.signals", "mpdoctor.progress", "mpdoctor.spellings",
            "mpdoctor.static.names",
        ),
    ),
    (
        "target: which TensorFlow and Keras a file is judged against",
        (
            "mpdoctor.project.target", "mpdoctor.project.requirements", "mpdoctor.project.declared",
            "mpdoctor.project.dockerfiles", "mpdoctor.project.environment", "mpdoctor.project.evidence",
            "mpdoctor.project.backend",
        ),
    ),
    (
        "findings: results, rules' registry, configuration, checked sources, edits applied to a text",
        (
            "mpdoctor.diagnostics", "mpdoctor.registry", "mpdoctor.notebook", "mpdoctor.sources",
            "mpdoctor.fingerprints", "mpdoctor.suppress", "mpdoctor.config", "mpdoctor.fix.apply",
        ),
    ),
    ("artifacts: SavedModel and checkpoint readers", ("mpdoctor.artifacts",)),
    (
        "analysis: the static analyses, the project analysis, what rules read of a trace",
        ("mpdoctor.static", "mpdoctor.project", "mpdoctor.trace_context", "mpdoctor.trace_user_code"),
    ),
    ("rules", ("mpdoctor.rules",)),
    (
        "passes: running the static pass and the trace, caching, baselines",
        (
            "mpdoctor.engine", "mpdoctor.trace", "mpdoctor.static_workers", "mpdoctor.collector", "mpdoctor.cache",
            "mpdoctor.baseline", "mpdoctor.crash_causes",
        ),
    ),
    ("fixes and plans, verified by re-running the passes", ("mpdoctor.fix", "mpdoctor.plan")),
    ("renderers", ("mpdoctor.report",)),
    ("interfaces", ("mpdoctor.cli", "mpdoctor.server", "mpdoctor.jupyter", "mpdoctor.merge", "mpdoctor.__main__",
                    "mpdoctor")),
]  # fmt: skip
# Imports that go up a layer on purpose, with why.
UPWARD_IMPORTS = {
    # Rules are plugins: the registry loads the package that imports every rule module, and names none of them.
    ("mpdoctor.registry", "mpdoctor.rules"),
}


def layer_of(module: str) -> int:
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]


def test_imports_go_down_the_layers():
    upward = [
        f"{source} ({LAYERS[layer_of(source)][0].split(':')[0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
        for source, target in sorted(import_graph().edges)
        if layer_of(target) > layer_of(source) and (source, target) not in UPWARD_IMPORTS
    ]
    assert upward == []


def test_every_allowed_upward_import_still_exists():
    """The exceptions only shrink: one that no longer happens is removed from the list."""
    edges = set(import_graph().edges)
    assert sorted(pair for pair in UPWARD_IMPORTS if pair not in edges) == []


def test_the_trace_child_imports_only_facts_and_artifact_readers():
    graph = import_graph(type_checking=False)  # what runs in the user's process
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


# Layer classes of Keras (both lines) that a collection of class names in mpdoctor would name: a literal holding two
# or more of them (or of the class names keras_semantics itself lists) is Keras semantics, and lives there.
_KERAS_CLASS_NAMES = {
    "Activation", "Add", "AveragePooling2D", "BatchNormalization", "Concatenate", "Conv1D", "Conv2D", "Conv3D",
    "Conv2DTranspose", "Dense", "DepthwiseConv2D", "Dropout", "Embedding", "Flatten", "Functional",
    "GlobalAveragePooling2D", "GlobalMaxPooling2D", "GRU", "InputLayer", "Lambda", "LayerNormalization", "LSTM",
    "MaxPooling2D", "Multiply", "MultiHeadAttention", "Permute", "ReLU", "Rescaling", "Reshape", "SeparableConv2D",
    "Sequential", "Softmax", "TFSMLayer", "ZeroPadding2D", "KerasLayer", "StringLookup", "IntegerLookup",
    "TextVectorization", "Hashing", "CategoryEncoding", "Normalization", "TimeDistributed", "Bidirectional",
    "TFOpLambda", "SlicingOpLambda", "ReversibleEmbedding",
}  # fmt: skip


def _class_name_strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Dict):
        elements = node.keys
    elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        elements = node.elts
    else:
        return []
    names = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return [name for name in names if name.rsplit(".", 1)[-1] in _KERAS_CLASS_NAMES]


def test_every_keras_class_name_collection_lives_in_keras_semantics():
    offenders = []
    for name, path in MODULES.items():
        if name == "mpdoctor.facts.keras_semantics":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found = _class_name_strings(node)
            if len(found) >= 2:
                offenders.append(f"{name}:{node.lineno}: {found[:4]}")
    assert offenders == []


def _rule_modules() -> set[str]:
    return {name for name in MODULES if name.startswith("mpdoctor.rules.mp")}


def test_rules_import_no_rule():
    """Analyses two rules share live in static/ or facts/ (MP504 gets MP501's loss-scaling fix from
    static/loss_scaling.py; MP401 and MP503 read which outputs feed a float16 loss from facts/loss_outputs.py)."""
    graph = import_graph()
    rules = _rule_modules()
    assert sorted((a, b) for a, b in graph.edges if a in rules and b in rules) == []


def test_no_rule_module_is_imported_by_the_engine_the_trace_or_a_renderer():
    """Rules are found through the registry (mpdoctor.rules imports them all); nothing else names one."""
    graph = import_graph()
    core = ("mpdoctor.engine", "mpdoctor.trace", "mpdoctor.report", "mpdoctor.registry")
    assert sorted((a, b) for a, b in graph.edges if a.startswith(core) and b in _rule_modules()) == []


MAX_MODULE_LINES = 800


def test_no_module_is_over_800_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert sorted(f"{name}: {n}" for name, n in sizes.items() if n > MAX_MODULE_LINES) == []


# The complexity budget: ruff's C901 at max-complexity 20 (pyproject.toml) runs with the lint. A function over it could
# only pass with a noqa comment for C901 on its `def` line: there is none, and none is to be added.
_COMPLEXITY_NOQA = "noqa: " + "C901"


def test_no_function_is_exempt_from_the_complexity_budget():
    exempt = [
        f"{name}:{number}"
        for name, path in MODULES.items()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _COMPLEXITY_NOQA in line
    ]
    assert exempt == []
