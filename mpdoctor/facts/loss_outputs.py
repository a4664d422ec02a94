"""The model outputs whose compiled loss the trace saw computing in float16/bfloat16: MP503 reports them, and MP402
leaves them to it (one output, one finding). An output with a risky activation is MP401's and not listed here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpdoctor.facts.dtypes import low_precision
from mpdoctor.facts.keras_semantics import risky_activation

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mpdoctor.facts.schema import Facts, GraphNode, LossRecord, ModelGraph, ModelRecord


def float16_loss_outputs(facts: Facts) -> Iterator[tuple[ModelRecord, ModelGraph, LossRecord, GraphNode]]:
    """(model, graph, loss record, output node) for model outputs whose compiled loss was observed computing in
    float16/bfloat16 and that MP401 does not already report."""
    for model, record in facts.numerics():
        loss = record.loss
        if loss is None or not low_precision(loss.dtype) or model.graph is None:
            continue
        for node, output in model.graph.output_nodes():
            if low_precision(output.actual_dtype) and not risky_activation(node.class_name, node.activation):
                yield model, model.graph, loss, node
