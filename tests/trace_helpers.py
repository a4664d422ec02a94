"""Small helpers shared by the trace tests (they import TensorFlow in-process)."""

import importlib
import json

FLAVOURS = ("keras3", "tf_keras")


def load_keras(flavour):
    """The Keras package of a flavour: `keras` (Keras 3) or `tf_keras`."""
    return importlib.import_module("keras" if flavour == "keras3" else "tf_keras")


def reset_policies():
    """Back to the float32 global policy in every Keras that is imported."""
    import sys

    for name in ("keras", "tf_keras"):
        module = sys.modules.get(name)
        if module is not None:
            module.mixed_precision.set_global_policy("float32")


def node(graph, name):
    """The graph node with this id (or, failing that, this layer name)."""
    for item in graph["nodes"]:
        if item["id"] == name:
            return item
    matches = [item for item in graph["nodes"] if item["name"] == name]
    assert len(matches) == 1, f"{name}: {[item['id'] for item in graph['nodes']]}"
    return matches[0]


def edges_into(graph, node_id):
    return sorted((e for e in graph["edges"] if e["target"] == node_id), key=lambda e: (e["call"], e["input_index"]))


def check_graph(graph):
    """Structural invariants every GRAPH dict must satisfy; returns the graph after a JSON round trip."""
    graph = json.loads(json.dumps(graph))
    ids = [item["id"] for item in graph["nodes"]]
    assert len(ids) == len(set(ids)), "duplicate node ids"
    known = set(ids)
    for edge in graph["edges"]:
        assert edge["source"] in known and edge["target"] in known, edge
    for item in graph["nodes"]:
        assert item["parent"] is None or item["parent"] in known, item
        assert len(item["predicted_output_dtypes"]) == len(item["output_dtypes"]), item
        assert len(item["predicted_input_dtypes"]) == len(item["input_dtypes"]), item
    for entry in graph["outputs"] + graph["inputs"]:
        assert entry["node"] is None or entry["node"] in known, entry
    return graph


# Model code that finds where its trace child writes the result (a local of the child's main(): the child's sys.argv
# is the traced file alone, as for `python file.py`), for tests that forge it or watch the trace's folder.
FIND_RESULT_PATH = (
    "import sys\n"
    "_frame = sys._getframe()\n"
    "while 'result_path' not in _frame.f_locals:\n"
    "    _frame = _frame.f_back\n"
    "RESULT_PATH = _frame.f_locals['result_path']\n"
)
