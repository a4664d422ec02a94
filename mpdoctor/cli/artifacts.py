"""`mpdoctor inspect` and `mpdoctor convert-checkpoint`.

Exit codes (mpdoctor.cli.exit_codes): 0 done (inspect: the audit found nothing), 1 the range audit found values that
overflow, underflow or are already inf/NaN (inspect --dtype only), or convert-checkpoint wrote nothing because the
cast would turn finite values into inf (without --saturate or --allow-inf), 2 an artifact that cannot be read or
written: one line `mpdoctor: error: PATH: problem` on stderr, no traceback, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from mpdoctor.cli.exit_codes import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from mpdoctor.facts.artifacts import (
    AuditRow,
    CheckpointAudit,
    CheckpointListing,
    Conversion,
    SavedModelInfo,
    TensorInfo,
)
from mpdoctor.facts.codec import ABSENT
from mpdoctor.facts.quantization import QuantizedLayerWeights, quantized_layers
from mpdoctor.printable import escape_controls


def add_inspect_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect",
        help="show what a checkpoint, weights file or SavedModel holds; --dtype audits its value ranges",
        description="Show every variable of a checkpoint (TF2 object-based, TF1 Saver), Keras .h5 / .weights.h5 / "
        ".keras weights, or the signatures of a SavedModel directory. With --dtype, audit every float "
        "variable for the target dtype: values that overflow, flush to zero or become subnormal "
        "(float16), the relative precision loss (bfloat16). Exit 1 when the audit finds a problem.",
    )
    parser.add_argument(
        "path",
        metavar="PATH",
        help="checkpoint prefix, .index file or directory, .h5, .weights.h5, .keras file, or SavedModel directory",
    )
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), help="audit the values for this dtype")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument(
        "--underflow-threshold",
        type=float,
        default=None,
        metavar="FRACTION",
        help="a variable underflows when more than this fraction of its values flush to zero or "
        "become subnormal (default: 0.01)",
    )
    parser.add_argument(
        "--verify-checksums",
        action="store_true",
        help="audit through TensorFlow's checkpoint reader, which checks every tensor's CRC32C "
        "(slower; by default float tensors are streamed straight from the data shards)",
    )
    parser.set_defaults(handler=run_inspect)
    return parser


def add_convert_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "convert-checkpoint",
        help="write a copy of a checkpoint with its float tensors cast to another dtype",
        description="Write a copy of IN at OUT in the same format (TF checkpoint, Keras .h5, .weights.h5, .keras) "
        "with every float tensor cast to --dtype; integer and string entries are copied untouched. IN is "
        "never modified, OUT is written atomically and verified by reading it back, and the range audit "
        "of the cast tensors is printed. When the cast would turn finite values into inf, nothing is written "
        "and the exit code is 1, unless --saturate or --allow-inf says what to do with them.",
    )
    parser.add_argument("input", metavar="IN", help="checkpoint prefix or directory, .h5, .weights.h5 or .keras file")
    parser.add_argument("output", metavar="OUT", help="output prefix (a directory when IN is a directory) or file")
    parser.add_argument(
        "--dtype", required=True, choices=("float16", "bfloat16", "float32"), help="dtype of the float tensors in OUT"
    )
    parser.add_argument(
        "--only",
        metavar="REGEX",
        help="cast only the float entries whose key matches REGEX (re.search); the others are copied untouched",
    )
    parser.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    beyond = parser.add_mutually_exclusive_group()
    beyond.add_argument(
        "--saturate",
        action="store_true",
        help="clamp values beyond the dtype's range to its max (+-65504 for float16) instead of refusing",
    )
    beyond.add_argument(
        "--allow-inf", action="store_true", help="write values beyond the dtype's range as inf instead of refusing"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.set_defaults(handler=run_convert)
    return parser


# --------------------------------------------------------------------------------------------------------------------


def _shown(path) -> str:
    """Relative to the working directory when inside it (like `mpdoctor check`), else as given."""
    text = os.fspath(path)
    try:
        relative = os.path.relpath(text)
    except ValueError:
        return text
    return text if relative.startswith("..") else relative


def _error(path, problem: str) -> int:
    print(escape_controls(f"mpdoctor: error: {_shown(path)}: {problem}"), file=sys.stderr)
    return EXIT_ERROR


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _shape(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]" if shape is not None else "?"


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _dtype_counts(counts: dict) -> str:
    return ", ".join(f"{dtype} {n:,}" for dtype, n in counts.items()) or "none"


def _print(lines, stream=None) -> None:
    stream = stream or sys.stdout  # keys and names come from the files: no terminal escapes
    stream.write("\n".join(escape_controls(line) for line in lines) + "\n")


def _checkpoint_lines(info: CheckpointListing) -> list[str]:
    lines = [
        f"{_shown(info.path)}: {info.description}",
        "  files: " + ", ".join(_shown(f) for f in info.files),
        f"  {_plural(len(info.variables), 'variable')}, {_size(info.total_bytes)}: {_dtype_counts(info.dtypes)}",
    ]
    if info.mirrored:
        lines.append(
            f"  (a Keras export stores them twice: the {_plural(info.mirrored, 'entry', 'entries')} under "
            "_all_variables/ repeat variables/ and are listed once)"
        )
    variables = info.variables
    if not variables:
        return lines
    extra = None  # the column that says what each key is, when the file says it
    if any(v.object_path for v in variables):
        extra = "OBJECT PATH", lambda v: v.object_path
    elif any(v.name for v in variables):
        extra = "WEIGHT NAME", lambda v: v.name
    header = ["KEY", "DTYPE", "SHAPE"] + ([extra[0]] if extra else [])
    rows = [header] + [[v.key, v.dtype, _shape(v.shape)] + ([extra[1](v) or ""] if extra else []) for v in variables]
    return lines + [""] + _table(rows)


def _fmt_max(value: float) -> str:
    return f"{value:.4g}"


def _audit_lines(audit: CheckpointAudit) -> list[str]:
    target = audit.target_dtype
    rows = audit.variables
    lines = [
        f"{target} range audit: {_plural(len(rows), 'float variable')} to cast "
        f"({_plural(audit.summary['values'], 'value')}), {_plural(audit.skipped, 'entry', 'entries')} skipped "
        f"(not float, or already {target})"
    ]
    if not rows:
        return lines
    if target == "bfloat16":
        table = [["KEY", "DTYPE", "VALUES", "OVERFLOW", "MAX |X|", "MAX REL ERR", "MEAN REL ERR", "STATUS"]]
        for r in rows:
            table.append(
                [
                    r.key,
                    r.dtype,
                    f"{r.values:,}",
                    f"{r.overflow:,}",
                    _fmt_max(r.max_abs),
                    f"{r.max_relative_error:.3%}",
                    f"{r.mean_relative_error:.3%}",
                    _status(r),
                ]
            )
        return lines + [""] + _table(table, right={2, 3, 4, 5, 6})
    table = [["KEY", "DTYPE", "VALUES", "OVERFLOW", "MAX |X|", "FLUSHED", "SUBNORMAL", "UNDERFLOW", "STATUS"]]
    for r in rows:
        table.append(
            [
                r.key,
                r.dtype,
                f"{r.values:,}",
                f"{r.overflow:,}",
                _fmt_max(r.max_abs),
                f"{r.flushed:,}",
                f"{r.subnormal:,}",
                f"{r.flushed_fraction + r.subnormal_fraction:.3%}",
                _status(r),
            ]
        )
    return lines + [""] + _table(table, right={2, 3, 4, 5, 6, 7})


def _status(row: AuditRow) -> str:
    if row.status == "nonfinite":
        return f"inf/NaN x{row.nonfinite:,}"
    return row.status


def _tool() -> dict:
    from mpdoctor._version import __version__

    return {"name": "mpdoctor", "version": __version__}


def _json(document: dict) -> None:
    json.dump(document, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# --------------------------------------------------------------------------------------------------------------------
# inspect


def _needs_numpy(path, exc: ImportError) -> int:
    """The one-line error when the readers cannot be imported: numpy (which comes with TensorFlow) is missing."""
    return _error(
        path, f"reading checkpoints needs numpy ({exc}): pip install numpy, or mpdoctor's [tf] extra (README, Install)"
    )


def run_inspect(args) -> int:
    try:
        from mpdoctor.artifacts.range_audit import DEFAULT_UNDERFLOW_THRESHOLD, audit_source
        from mpdoctor.artifacts.sources import describe, open_source
    except ImportError as exc:
        return _needs_numpy(args.path, exc)
    from mpdoctor.artifacts.errors import CheckpointError
    from mpdoctor.artifacts.locate import locate

    threshold = DEFAULT_UNDERFLOW_THRESHOLD if args.underflow_threshold is None else args.underflow_threshold
    if not 0 <= threshold <= 1:
        return _error("--underflow-threshold", f"must be a fraction between 0 and 1, not {threshold}")
    try:
        located = locate(args.path)
        if located.kind == "savedmodel":
            return _inspect_savedmodel(args, located, threshold)
        with open_source(args.path) as (located, source):
            info = describe(located, source)
            audit = None
            if args.dtype:
                audit = audit_source(located, source, args.dtype, threshold, None, args.verify_checksums)
    except CheckpointError as exc:
        return _error(exc.path, exc.problem)
    verdict = audit.verdict if audit else _plain_verdict(info)
    quantized = _quantized_layers(info)
    if quantized and audit is None:  # a cast to float16 is not how quantized weights load: no MP301 advice
        verdict = f"{_quantized_verdict(quantized)}; {len(info.variables):,} variables ({_dtype_counts(info.dtypes)})"
    if args.format == "json":
        _json(
            {
                "version": 1,
                "tool": _tool(),
                "kind": "checkpoint",
                "checkpoint": info.to_json(),
                "audit": audit.to_json() if audit is not None else None,
                "verdict": verdict,
                "quantized_layers": [asdict(q) for q in quantized],
            }
        )
    else:
        lines = _checkpoint_lines(info) + _quantized_lines(quantized)
        if audit:
            lines += [""] + _audit_lines(audit)
        _print(lines + ["", f"verdict: {verdict}"])
    return EXIT_FINDINGS if audit and not audit.safe else EXIT_OK


def _plain_verdict(info: CheckpointListing) -> str:
    counts = info.dtypes
    floats = {d: n for d, n in counts.items() if d in ("float16", "bfloat16", "float32", "float64")}
    text = f"{len(info.variables):,} variables ({_dtype_counts(counts)})"
    if floats.get("float32") or floats.get("float64"):
        text += (
            "; restoring them into float16/bfloat16 variables needs a cast (MP301): pass --dtype float16 or "
            "bfloat16 to audit the values, `mpdoctor convert-checkpoint` to convert"
        )
    return text


def _quantized_layers(info: CheckpointListing) -> list[QuantizedLayerWeights]:
    if info.format not in ("keras3-weights-h5", "keras3-archive"):
        return []
    return quantized_layers([(v.key, v.dtype, v.shape) for v in info.variables])


def _quantized_lines(quantized: list[QuantizedLayerWeights]) -> list[str]:
    if not quantized:
        return []
    rows = [["QUANTIZED LAYER", "MODE", "VARIABLES"]] + [[q.layer, q.mode, str(q.variables)] for q in quantized]
    return [""] + _table(rows)


def _quantized_verdict(quantized: list[QuantizedLayerWeights]) -> str:
    modes = sorted({q.mode for q in quantized})
    counts = ", ".join(f"{mode} {sum(q.mode == mode for q in quantized)}" for mode in modes)
    quantize = " / ".join(f'`model.quantize("{mode}")`' for mode in modes)
    return (
        f"{_plural(len(quantized), 'quantized layer')} ({counts}: kernels with their scales): they load into the "
        f"same model quantized the same way ({quantize} before `load_weights`; a `.keras` archive with "
        f"`keras.models.load_model`); a float model fails to load them with a variable count mismatch (MP706)"
    )


def _split_message(message: str) -> tuple[str, str]:
    """savedmodel.py messages read "PATH cannot be ...": as (PATH, problem) for the one-line error."""
    for marker in (" cannot ", " contains ", " has no ", " is a ", " does not ", " is not "):
        if marker in message:
            path, rest = message.split(marker, 1)
            return path, marker.strip() + " " + rest
    return "", message


def _inspect_savedmodel(args, located, threshold: float) -> int:
    from mpdoctor.artifacts.errors import CheckpointError
    from mpdoctor.artifacts.range_audit import audit_source
    from mpdoctor.artifacts.sources import describe, open_source

    try:
        from mpdoctor.artifacts.savedmodel import read_savedmodel
    except ImportError as exc:
        return _error(located.target, f"cannot read SavedModels here: {exc}")
    info = read_savedmodel(os.path.abspath(located.target))
    if info.error:
        path, problem = _split_message(info.error.message or info.error.kind)
        return _error(path or located.target, problem)
    prefix = os.path.join(located.target, "variables", "variables")
    variables: CheckpointListing | None = None
    audit: CheckpointAudit | None = None
    if os.path.isfile(prefix + ".index"):
        try:
            with open_source(prefix) as (vloc, source):
                variables = describe(vloc, source)
                if args.dtype:
                    audit = audit_source(vloc, source, args.dtype, threshold, None, args.verify_checksums)
        except CheckpointError as exc:
            return _error(exc.path, exc.problem)
    verdict = _savedmodel_verdict(info, variables, audit, args.dtype)
    if args.format == "json":
        _json(
            {
                "version": 1,
                "tool": _tool(),
                "kind": "savedmodel",
                "savedmodel": info.to_json(),
                "checkpoint": variables.to_json() if variables is not None else None,
                "audit": audit.to_json() if audit is not None else None,
                "verdict": verdict,
            }
        )
    else:
        _print(_savedmodel_lines(located, info, variables, audit) + ["", f"verdict: {verdict}"])
    return EXIT_FINDINGS if audit and not audit.safe else EXIT_OK


def _savedmodel_lines(
    located, info: SavedModelInfo, variables: CheckpointListing | None, audit: CheckpointAudit | None
) -> list[str]:
    lines = [f"{_shown(located.path)}: SavedModel (tags: {', '.join(info.tags) or 'none'})"]
    lines.append(f"signatures: {len(info.signatures)}")
    for signature in info.signatures:
        lines.append(f"  {signature.name}")
        lines.append("    inputs:  " + _tensors(signature.inputs))
        lines.append("    outputs: " + _tensors(signature.outputs))
    lines.append(f"concrete functions: {len(info.functions)}")
    for function in info.functions:
        label = function.name
        if function.concrete_function:
            label += f" ({function.concrete_function})"
        lines.append(f"  {label}")
        lines.append("    inputs:  " + _tensors(function.inputs))
    lines.append(f"accepted input dtypes: {', '.join(info.accepted_input_dtypes) or 'unknown'}")
    if variables:
        lines += [""] + _checkpoint_lines(variables)
    if audit:
        lines += [""] + _audit_lines(audit)
    return lines


def _tensors(items: list[TensorInfo]) -> str:
    if not items:
        return "none"
    parts = []
    for item in items:
        if item.value is not ABSENT and item.dtype is None:
            parts.append(f"{item.name}={item.value!r}")
        else:
            parts.append(f"{item.name}: {item.dtype or '?'} {_shape(item.shape)}")
    return ", ".join(parts)


def _savedmodel_verdict(
    info: SavedModelInfo, variables: CheckpointListing | None, audit: CheckpointAudit | None, dtype: str | None
) -> str:
    accepted = info.accepted_input_dtypes
    parts = []
    if accepted and not any(d in ("float16", "bfloat16") for d in accepted):
        parts.append(
            f"accepts {', '.join(accepted)} inputs only: a layer wrapping it under a float16/bfloat16 "
            'policy needs dtype="float32" (MP201)'
        )
    elif accepted:
        parts.append(f"accepts {', '.join(accepted)} inputs")
    else:
        parts.append("input dtypes unknown (no signature or __call__ function)")
    if audit:
        parts.append(f"variables: {audit.verdict}")
    elif variables is not None:
        parts.append(f"{len(variables.variables):,} variables ({_dtype_counts(variables.dtypes)})")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------------------------
# convert-checkpoint


def run_convert(args) -> int:
    try:
        from mpdoctor.artifacts.convert import WouldOverflow, convert_checkpoint
        from mpdoctor.artifacts.range_audit import LIMIT_TEXT
        from mpdoctor.artifacts.sources import FORMAT_DESCRIPTIONS
    except ImportError as exc:
        return _needs_numpy(args.input, exc)
    from mpdoctor.artifacts.errors import CheckpointError

    overflow = "saturate" if args.saturate else "allow" if args.allow_inf else "refuse"
    try:
        result = convert_checkpoint(
            args.input,
            args.output,
            args.dtype,
            only=args.only,
            force=args.force,
            require_match=args.only is not None,
            overflow=overflow,
        )
    except WouldOverflow as exc:
        _error(exc.path, exc.problem)
        return EXIT_FINDINGS
    except CheckpointError as exc:
        return _error(exc.path, exc.problem)
    except OSError as exc:
        return _error(exc.filename or args.output, f"cannot write: {exc.strerror or exc}")
    if args.format == "json":
        _json({"version": 1, "tool": _tool(), "conversion": result.to_json()})
        return EXIT_OK
    _print(_conversion_lines(result, FORMAT_DESCRIPTIONS[result.format], LIMIT_TEXT[result.target_dtype]))
    return EXIT_OK


def _conversion_lines(result: Conversion, description: str, limit: str) -> list[str]:
    audit = result.audit
    lines = [
        f"{_shown(result.path)}: {description}",
        f"cast {_plural(len(result.cast), 'float entry', 'float entries')} to {result.target_dtype}, "
        f"copied {_plural(result.copied, 'entry', 'entries')} untouched",
    ]
    if not result.cast:
        lines.append(f"note: nothing to cast: every float entry is already {result.target_dtype}")
    if audit.variables:
        lines += [""] + _audit_lines(audit) + ["", f"verdict: {audit.verdict}"]
        if result.clamped:
            lines.append(f"clamped {_plural(result.clamped, 'value')} to +-{limit} (--saturate)")
        became_inf = sum(result.became_inf.values())
        if became_inf:
            lines.append(f"warning: {_plural(became_inf, 'value')} became inf in the output (--allow-inf)")
    seconds = max(result.seconds, 1e-9)
    lines += [
        "",
        "wrote "
        + ", ".join(_shown(f) for f in result.files)
        + f" ({_size(result.bytes_in)} read, {_size(result.bytes_out)} written, {result.seconds:.2f} s, "
        f"{_size(int(result.bytes_in / seconds))}/s); verified by reading it back",
    ]
    lines += [f"note: {n}" for n in result.notes]
    return lines
