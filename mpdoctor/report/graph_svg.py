"""The layer graph of a traced model (mpdoctor.facts.schema.ModelGraph) as an inline SVG for the HTML report.

Readable at hundreds of layers: a nested model with more than NESTED_INLINE_LIMIT layers is drawn as one box (and as
its own figure after the model's), a linear run of more than CHAIN_LIMIT layers with one input, one output and the
same compute dtype becomes one "N layers" box, and the rows of the layered layout (networkx topological
generations, ordered by the mean position of each node's predecessors) wrap at MAX_ROW boxes. Layers named by a
finding, and the tensors flowing into them, are never folded away and are drawn highlighted. Every user string is
escaped: the SVG is inserted into the page as markup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from typing import Any

from mpdoctor.facts.schema import GraphEdge, GraphNode, ModelGraph

CHAIN_LIMIT = 3
NESTED_INLINE_LIMIT = 12
MAX_ROW = 8
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 176, 40, 24, 34, 16
DTYPE_FILL = {"float16": "#ffd8a8", "bfloat16": "#e5dbff", "float32": "#d0ebff", "float64": "#c3fae8"}
OTHER_FILL = "#e9ecef"


@dataclass
class Box:
    """One drawn node: a layer, a folded chain of layers, or a folded nested model."""

    id: str
    label: str
    detail: str  # the layer class(es); the box shows it shortened, then the whole dtype
    dtype: str | None
    members: list[GraphNode] = field(default_factory=list)
    savedmodel: bool = False
    finding: bool = False
    float32_plan: bool = False  # a layer `mpdoctor plan` keeps in float32
    is_output: bool = False
    x: float = 0.0
    y: float = 0.0


@dataclass
class Figure:
    title: str
    svg: str
    layers: int
    boxes: int


def model_figures(
    graph: ModelGraph, finding_layers: set[str], float32_plan: frozenset[str] | set[str] = frozenset()
) -> list[Figure]:
    """The model's figure, then one figure per folded nested model (folded again inside when big). Layers of
    `float32_plan` (node ids `mpdoctor plan` keeps in float32) are never folded and are drawn outlined."""
    nodes = {n.id: n for n in graph.nodes}
    ancestors = {node_id: _ancestors(node, nodes) for node_id, node in nodes.items()}
    inner_layers: dict[str, int] = {}
    for node_id, chain in ancestors.items():
        for model_id in chain:
            inner_layers[model_id] = inner_layers.get(model_id, 0) + (not nodes[node_id].is_model)
    folded = {m for m, count in inner_layers.items() if nodes[m].is_model and count > NESTED_INLINE_LIMIT}
    layout = _Scope(nodes, ancestors, inner_layers, folded, finding_layers, set(float32_plan))
    figures = [layout.figure(graph.model or "model", None, nodes, graph.edges)]
    for model_id in (m for m in nodes if m in folded):
        inner = {i: n for i, n in nodes.items() if model_id in ancestors[i]}
        edges = [e for e in graph.edges if e.source in inner and e.target in inner]
        figures.append(layout.figure(model_id, model_id, inner, edges))
    return figures


def _ancestors(node: GraphNode, nodes: dict[str, GraphNode]) -> list[str]:
    """The nested models holding a node, innermost first."""
    chain, parent = [], node.parent
    while parent and parent in nodes and parent not in chain:
        chain.append(parent)
        parent = nodes[parent].parent
    return chain


@dataclass
class _Scope:
    nodes: dict[str, GraphNode]
    ancestors: dict[str, list[str]]
    inner_layers: dict[str, int]
    folded: set[str]
    finding_layers: set[str]
    float32_plan: set[str]

    def figure(self, title: str, scope: str | None, nodes: dict[str, GraphNode], edges: list[GraphEdge]) -> Figure:
        import networkx as nx

        # Each node is drawn as itself or as the outermost folded nested model holding it below `scope`.
        represent: dict[str, str] = {}
        for node_id in nodes:
            chain = self.ancestors[node_id]
            below = chain[: chain.index(scope)] if scope in chain else chain
            outer = [m for m in below if m in self.folded]
            represent[node_id] = outer[-1] if outer else node_id
        # An unfolded nested model's own node has no edges (its layers are drawn): leave it out.
        shown = {n for n in represent.values() if n in self.folded or not self.inner_layers.get(n)}
        digraph = nx.DiGraph()
        digraph.add_nodes_from(n for n in nodes if n in shown)
        edge_info: dict[tuple[str, str], GraphEdge] = {}
        for edge in edges:
            source, target = represent.get(edge.source), represent.get(edge.target)
            if source in shown and target in shown and source != target:
                digraph.add_edge(source, target)
                edge_info.setdefault((source, target), edge)
        finding_ids = {
            rep
            for node_id, rep in represent.items()
            if node_id in self.finding_layers or nodes[node_id].name in self.finding_layers
        }
        kept = {rep for node_id, rep in represent.items() if node_id in self.float32_plan}
        boxes, owner = _fold_chains(digraph, nodes, finding_ids | kept, self.inner_layers, self.folded)
        for box in boxes.values():
            box.finding, box.float32_plan = box.id in finding_ids, box.id in kept
        for box in boxes.values():  # a layer of an unfolded nested model shows as model/layer
            if not box.id.startswith("chain:"):
                box.label = box.id[len(scope) + 1 :] if scope and box.id.startswith(scope + "/") else box.id
        layered = nx.DiGraph()
        layered.add_nodes_from(boxes)
        for source, target in digraph.edges:
            if owner[source] != owner[target]:
                layered.add_edge(owner[source], owner[target])
        _layout(layered, boxes)
        svg = _draw(boxes, layered, edge_info, owner)
        return Figure(title, svg, sum(1 for n in nodes.values() if not n.is_model), len(boxes))


def _box_for(node: GraphNode, finding: bool, inner_layers: dict[str, int], folded: set[str]) -> Box:
    detail = node.class_name or node.kind or ""
    if node.id in folded:
        detail = f"{detail}: {inner_layers[node.id]} layers (below)"
    dtype = node.compute_dtype
    if node.kind == "input" and node.output_dtypes:
        dtype = node.output_dtypes[0]  # an input layer computes nothing: show the dtype it feeds in
    return Box(
        node.id,
        node.name or node.id,
        detail,
        dtype,
        [node],
        savedmodel=bool(node.savedmodel_handle) or node.kind == "savedmodel",
        finding=finding,
        is_output=node.is_output,
    )


def _fold_chains(
    digraph: Any, nodes: dict[str, GraphNode], finding_ids: set[str], inner_layers: dict[str, int], folded: set[str]
) -> tuple[dict[str, Box], dict[str, str]]:
    """Boxes by id, and the box id that owns each graph node."""

    def foldable(n: str) -> bool:
        node = nodes[n]
        return (
            digraph.in_degree(n) == 1
            and digraph.out_degree(n) == 1
            and n not in finding_ids
            and not node.savedmodel_handle
            and not node.is_output
            and not node.is_model
        )

    boxes: dict[str, Box] = {}
    owner: dict[str, str] = {}
    for n in digraph.nodes:
        if n in owner:
            continue
        if foldable(n):
            chain = _chain_through(digraph, n, foldable, nodes)
            if len(chain) > CHAIN_LIMIT:
                box = _chain_box(chain, nodes)
                boxes[box.id] = box
                owner.update({member: box.id for member in chain})
                continue
        box = _box_for(nodes[n], n in finding_ids, inner_layers, folded)
        boxes[n] = box
        owner[n] = n
    return boxes, owner


def _chain_through(digraph: Any, start: str, foldable: Callable[[str], bool], nodes: dict[str, GraphNode]) -> list[str]:
    dtype = nodes[start].compute_dtype

    def same(n: str) -> bool:
        return foldable(n) and nodes[n].compute_dtype == dtype

    chain = [start]
    node = start
    while True:  # backwards
        (previous,) = digraph.predecessors(node)
        if not same(previous) or previous in chain or digraph.out_degree(previous) != 1:
            break
        chain.insert(0, previous)
        node = previous
    node = start
    while True:
        (following,) = digraph.successors(node)
        if not same(following) or following in chain or digraph.in_degree(following) != 1:
            break
        chain.append(following)
        node = following
    return chain


def _chain_box(chain: list[str], nodes: dict[str, GraphNode]) -> Box:
    counts: dict[str, int] = {}
    for n in chain:
        counts[nodes[n].class_name or "?"] = counts.get(nodes[n].class_name or "?", 0) + 1
    classes = ", ".join(f"{c} ×{k}" if k > 1 else c for c, k in counts.items())
    dtype = nodes[chain[0]].compute_dtype
    return Box(
        f"chain:{chain[0]}",
        f"{len(chain)} layers: {nodes[chain[0]].name} … {nodes[chain[-1]].name}",
        classes,
        dtype,
        [nodes[n] for n in chain],
    )


def _layout(layered: Any, boxes: dict[str, Box]) -> None:
    import networkx as nx

    try:
        generations = [list(g) for g in nx.topological_generations(layered)]
    except nx.NetworkXUnfeasible:  # a cycle cannot come from a Keras graph; draw in node order rather than fail
        generations = [list(layered.nodes)]
    order = {n: i for i, n in enumerate(layered.nodes)}
    column_of: dict[str, int] = {}
    row = 0
    for generation in generations:
        # Each box goes under the mean column of its predecessors (so a long edge runs down an empty column
        # rather than through the boxes of a parallel branch), pushed right only to make room.
        def desired(n: str) -> tuple[float, int]:
            columns = [column_of[p] for p in layered.predecessors(n) if p in column_of]
            return (sum(columns) / len(columns) if columns else 0.0, order[n])

        generation.sort(key=desired)
        for start in range(0, len(generation), MAX_ROW):
            chunk = generation[start : start + MAX_ROW]
            free = 0
            for index, n in enumerate(chunk):
                wanted = min(int(desired(n)[0]), MAX_ROW - (len(chunk) - index))
                column = max(free, wanted)
                column_of[n] = column
                free = column + 1
                boxes[n].x = MARGIN + column * (BOX_W + GAP_X)
                boxes[n].y = MARGIN + row * (BOX_H + GAP_Y)
            row += 1


DETAIL_CHARS = 30  # what fits in a box at the detail font


def _detail(box: Box) -> str:
    """`Dense · float16`: the class text shortened if it must be, the dtype always whole (it is what the colour
    means)."""
    dtype = f" · {box.dtype or '-'}"
    return _short(box.detail, max(4, DETAIL_CHARS - len(dtype))) + dtype


def _short(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _draw(
    boxes: dict[str, Box], layered: Any, edge_info: dict[tuple[str, str], GraphEdge], owner: dict[str, str]
) -> str:
    width = max((b.x for b in boxes.values()), default=0) + BOX_W + 2 * MARGIN
    height = max((b.y for b in boxes.values()), default=0) + BOX_H + 2 * MARGIN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="layer-graph" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0L8,4L0,8z" fill="#6e7781"/></marker>'
        '<marker id="arrow-hit" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0L8,4L0,8z" fill="#cf222e"/></marker></defs>',
    ]
    dtypes_between: dict[tuple[str, str], set[str]] = {}
    for (s, t), edge in edge_info.items():
        dtypes_between.setdefault((owner[s], owner[t]), set()).add(str(edge.dtype))
    for source, target in layered.edges:
        a, b = boxes[source], boxes[target]
        hit = b.finding
        dtypes = ", ".join(sorted(dtypes_between.get((source, target), ()))) or "?"
        x1, y1, x2, y2 = a.x + BOX_W / 2, a.y + BOX_H, b.x + BOX_W / 2, b.y
        mid = (y1 + y2) / 2
        parts.append(
            f'<path class="edge{" finding" if hit else ""}" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} '
            f'{x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}" marker-end="url(#{"arrow-hit" if hit else "arrow"})">'
            f"<title>{escape(a.label)} → {escape(b.label)}: {escape(dtypes)}</title></path>"
        )
    for box in boxes.values():
        classes = (
            ["node"]
            + (["finding"] if box.finding else [])
            + (["float32-plan"] if box.float32_plan else [])
            + (["savedmodel"] if box.savedmodel else [])
            + (["chain"] if box.id.startswith("chain:") else [])
        )
        tooltip = "\n".join(f"{m.id} ({m.class_name}, {m.policy or m.compute_dtype})" for m in box.members[:40])
        if len(box.members) > 40:
            tooltip += f"\n… {len(box.members) - 40} more"
        fill = DTYPE_FILL.get(box.dtype or "", OTHER_FILL)
        badge = (
            "SavedModel" if box.savedmodel else ("float32" if box.float32_plan else ("output" if box.is_output else ""))
        )
        parts.append(
            f'<g class="{" ".join(classes)}" data-layer="{escape(box.id)}" transform="translate({box.x:.0f},'
            f'{box.y:.0f})"><title>{escape(tooltip)}</title>'
            f'<rect width="{BOX_W}" height="{BOX_H}" rx="5" fill="{fill}"/>'
            f'<text x="8" y="16" class="name">{escape(_short(box.label, 22 if badge else 27))}</text>'
            f'<text x="8" y="31" class="detail">{escape(_detail(box))}</text>'
            f'<text x="{BOX_W - 6}" y="12" text-anchor="end" class="badge">{badge}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
