"""Clean up what mechanical fixes leave behind: `x = x` and conditionals whose arms became the same.

Dropping `get_unscaled_gradients(...)` from `gradients = opt.get_unscaled_gradients(gradients)` leaves
`gradients = gradients`; from `if amp: gradients = opt.get_unscaled_gradients(g) else: gradients = g` it leaves two
identical arms. Such lines are removed (an `if` left with nothing to do goes too) and such conditionals replaced by
their one arm, but only on the lines the fix changed: the user's own code is not ours to tidy. libcst keeps the
rest of the file byte for byte. A condition is dropped only when evaluating it has no effect (names, attributes,
constants, comparisons of those): `x if f() else x` stays.
"""

from __future__ import annotations

import difflib
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # libcst's own imports
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider


def simplify_artifacts(original: str, fixed: str) -> str:
    """`fixed` without the self-assignments and same-armed conditionals on lines that differ from `original`."""
    changed = _changed_lines(original, fixed)
    if not changed or ("=" not in fixed and " if " not in fixed):
        return fixed
    try:
        wrapper = MetadataWrapper(cst.parse_module(fixed))
    except cst.ParserSyntaxError:
        return fixed  # the parse check reports it
    return wrapper.visit(_Simplifier(changed)).code


def is_self_assignment(statement: cst.BaseSmallStatement) -> bool:
    return (
        isinstance(statement, cst.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0].target, cst.Name)
        and isinstance(statement.value, cst.Name)
        and statement.targets[0].target.value == statement.value.value
    )


def _changed_lines(original: str, fixed: str) -> set[int]:
    """1-based lines of `fixed` that are not lines of `original` (replaced or inserted)."""
    matcher = difflib.SequenceMatcher(None, original.splitlines(), fixed.splitlines(), autojunk=False)
    return {j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal" for j in range(j1, j2)}


def _pure(expr: cst.BaseExpression) -> bool:
    """Evaluating `expr` has no effect worth keeping (a flag, an attribute, a comparison of those)."""
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Attribute):
        return _pure(expr.value)
    if isinstance(expr, cst.UnaryOperation):
        return _pure(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return _pure(expr.left) and _pure(expr.right)
    if isinstance(expr, cst.Comparison):
        return _pure(expr.left) and all(_pure(c.comparator) for c in expr.comparisons)
    return False


class _Simplifier(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, changed: set[int]):
        super().__init__()
        self.changed = changed

    def _touched(self, node: cst.CSTNode) -> bool:
        span = self.get_metadata(PositionProvider, node)
        return any(line in self.changed for line in range(span.start.line, span.end.line + 1))

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if not self._touched(original_node):
            return updated_node
        kept = [s for s in updated_node.body if not is_self_assignment(s)]
        if len(kept) == len(updated_node.body):
            return updated_node
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(body=kept)

    def leave_If(self, original_node, updated_node):
        if not self._touched(original_node) or not _pure(updated_node.test):
            return updated_node
        orelse = updated_node.orelse
        if isinstance(orelse, cst.Else) and updated_node.body.deep_equals(orelse.body):
            return cst.FlattenSentinel(updated_node.body.body)  # both arms do the same: keep one, unconditionally
        if not updated_node.body.body and orelse is None:
            return cst.RemoveFromParent()  # nothing left to do under the condition
        return updated_node

    def leave_IfExp(self, original_node, updated_node):
        if (
            self._touched(original_node)
            and _pure(updated_node.test)
            and updated_node.body.deep_equals(updated_node.orelse)
        ):
            return updated_node.body
        return updated_node
