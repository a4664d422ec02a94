"""Which static finding a crash of the trace is the consequence of (one finding per root cause).

A run that fails on an API a rule reports (MP103's `get_scaled_loss` on Keras 3) is that finding seen again: its
MP001 is left out. The rule decides (its `absorbs_crash` hook, mpdoctor.registry), for each of its findings in the
crashed file, not only on the crash's line: an AttributeError raised inside a `tf.function` surfaces at the call of
the function (`train_step(x, y)`), not on the line that names the missing method."""

from __future__ import annotations

from collections.abc import Iterable

from mpdoctor.diagnostics import Diagnostic
from mpdoctor.registry import engine_code, hooks


def caused_by_static(crash: Diagnostic, static: Iterable[Diagnostic]) -> bool:
    """Whether the trace finding `crash` is a failed run that a static finding of its file explains."""
    if crash.code != engine_code("run_failed"):
        return False
    absorbers = {code: hook.fn for hook in hooks("absorbs") for code in hook.codes}
    return any(
        absorbers[s.code](crash, s) for s in static if s.code in absorbers and s.location.path == crash.location.path
    )
