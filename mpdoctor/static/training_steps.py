"""The file's own training steps by name (issue 30): the module-level functions and the methods of module-level
classes (`Class.method`) that hold a training loop (a `tape.gradient` whose result reaches the optimizer, or a
Keras 3 step written for JAX or PyTorch: mpdoctor.static.backend_steps) and are called as a step is,
`step(inputs, labels)` or `step(inputs)`. The trace child runs them for MP504 (the gradients the user's loss really
produces) and `--fix` for the fix check (mpdoctor.fix.step)."""

from __future__ import annotations

import ast

from mpdoctor.static.backend_steps import backend_steps
from mpdoctor.static.context import StaticContext
from mpdoctor.static.training_loop import training_loops

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def step_units(tree: ast.Module) -> dict[str, tuple[ast.FunctionDef | ast.AsyncFunctionDef, range]]:
    """name -> (definition, its lines with decorators) of the module-level functions and the methods of
    module-level classes (as `Class.method`)."""
    found = [(node.name, node) for node in tree.body if isinstance(node, FUNCTIONS)]
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            found += [(f"{cls.name}.{node.name}", node) for node in cls.body if isinstance(node, FUNCTIONS)]
    return {
        name: (node, range(min([node.lineno, *(d.lineno for d in node.decorator_list)]), (node.end_lineno or 0) + 1))
        for name, node in found
    }


def not_a_step(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Why `name` is not called as step(inputs, labels) or step(inputs) (None when it is): a function of other
    parameters (a `main()`, a whole training loop) is not run."""
    positional = [*node.args.posonlyargs, *node.args.args][1 if "." in name else 0 :]
    required = len(positional) - len(node.args.defaults)
    # (inputs) alone only for a function named as a step (a GAN's `train_step(images)`; not a `train(dataset)`).
    takes = (1, 2) if "step" in name.rpartition(".")[2].lower() else (2,)
    if isinstance(node, ast.AsyncFunctionDef) or required not in takes or any(d is None for d in node.args.kw_defaults):
        return f"`{name}` does not take (inputs, labels) as a training step does"
    return None


def training_steps(ctx: StaticContext) -> list[str]:
    """The names of the file's training steps, in the order of their loops (GradientTape loops first)."""
    units = step_units(ctx.tree)
    found = [next((n for n, (node, _) in units.items() if node is loop.scope), None) for loop in training_loops(ctx)]
    # A JAX or PyTorch step: the unit whose lines hold its gradient call (a loss function nested in it included).
    found += [next((n for n, (_, lines) in units.items() if s.at.lineno in lines), None) for s in backend_steps(ctx)]
    names: list[str] = []
    for name in found:
        if name is None or name in names or not_a_step(name, units[name][0]) is not None:
            continue
        names.append(name)
    return names
