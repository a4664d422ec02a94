"""What each TensorFlow release ships, as data: the releases mpdoctor knows, which Keras `tf.keras` and the `keras`
package are in each, and the mixed-precision APIs that disappeared along the way (MP103 and the trace's
version-gap check read the same table). Pure Python: never imports TensorFlow.

A release is (major, minor): patch releases never added or removed these APIs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

Release = tuple[int, int]

TF1_RELEASES: tuple[Release, ...] = tuple((1, minor) for minor in range(16))  # 1.0 ... 1.15
TF2_RELEASES: tuple[Release, ...] = tuple((2, minor) for minor in range(22))  # 2.0 ... 2.21
KNOWN_RELEASES: tuple[Release, ...] = TF1_RELEASES + TF2_RELEASES
# `tf.keras` is Keras 3 from TF 2.16 on (unless TF_USE_LEGACY_KERAS=1 routes it to tf_keras), and TF 2.16 depends on
# the keras 3 package; before, both were Keras 2.
FIRST_KERAS3: Release = (2, 16)
# The non-experimental `keras.mixed_precision` API (set_global_policy, LossScaleOptimizer(opt)) exists from TF 2.4.
FIRST_CURRENT_MIXED_PRECISION: Release = (2, 4)
# `tf.keras.optimizers.*` are the new Keras optimizers from TF 2.11 on (the old ones moved to
# `tf.keras.optimizers.legacy`, TF 2.11 release notes); the TF1 graph rewrite only wraps the old OptimizerV2 ones.
FIRST_NEW_KERAS_OPTIMIZERS: Release = (2, 11)


def release_text(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


def parse_release(text: str) -> Release | None:
    """(2, 15) from "2.15", "2.15.1", "2.15.0rc1", "2.15.*"; None when it does not start with two numbers."""
    parts = text.strip().lstrip("v").split(".")
    if len(parts) < 2:
        return None
    minor = ""
    for ch in parts[1]:
        if not ch.isdigit():
            break
        minor += ch
    if not parts[0].isdigit() or not minor or len(parts[0]) + len(minor) > 12:  # int() refuses thousands of digits
        return None
    return int(parts[0]), int(minor)


def known_releases(installed: Release | None = None) -> tuple[Release, ...]:
    """The known releases, plus an installed one newer than the table (a future TF is a release too)."""
    if installed is not None and installed not in KNOWN_RELEASES and installed > KNOWN_RELEASES[-1]:
        return KNOWN_RELEASES + (installed,)
    return KNOWN_RELEASES


def tf_keras_major(release: Release, legacy_keras: bool) -> int:
    """Which Keras `tf.keras` is on this TensorFlow release."""
    return 2 if release < FIRST_KERAS3 or legacy_keras else 3


def keras_package_major(release: Release) -> int:
    """Which Keras `import keras` gives on this TensorFlow release when the keras package is not pinned apart
    (TF <= 2.15 pulled keras 2.x, TF >= 2.16 depends on keras 3)."""
    return 2 if release < FIRST_KERAS3 else 3


def range_text(releases: Iterable[Release]) -> str:
    """Compact text of a set of releases: "2.12-2.15", "2.21", "1.0-1.15, 2.0-2.3"."""
    ordered = sorted(set(releases))
    if not ordered:
        return "none"
    runs: list[list[Release]] = [[ordered[0]]]
    for release in ordered[1:]:
        last = runs[-1][-1]
        if release[0] == last[0] and release[1] == last[1] + 1:
            runs[-1].append(release)
        else:
            runs.append([release])
    return ", ".join(
        release_text(run[0]) if len(run) == 1 else f"{release_text(run[0])}-{release_text(run[-1])}" for run in runs
    )


# ------------------------------------------------------------------------------------------------ removals


@dataclass(frozen=True)
class Removal:
    """A mixed-precision API that TensorFlow or Keras removed. The exact release is not always known: `present_in`
    is the newest release known to have it, `absent_from` the oldest known without it; releases in between are
    unknown (findings there are low confidence). `added_in`: releases before it never had the API (not a removal:
    code using it cannot have targeted them)."""

    api: str  # canonical dotted prefix (mpdoctor.static.names spelling)
    present_in: Release | None
    absent_from: Release
    evidence: str
    added_in: Release | None = None

    def missing_in(self, release: Release) -> bool | None:
        """True: gone in this release; False: there; None: not known."""
        if release >= self.absent_from:
            return True
        if self.present_in is not None and release <= self.present_in:
            return False
        return None

    def verdict(self, releases: Iterable[Release]) -> str:
        """Over the target's releases (those before `added_in` left out): "all" (missing in every one), "none"
        (there in every one), "some" (missing in some or unknown)."""
        relevant = [r for r in releases if self.added_in is None or r >= self.added_in]
        states = {self.missing_in(r) for r in relevant}
        if not states or states == {False}:
            return "none"
        return "all" if states == {True} else "some"

    @property
    def removed_text(self) -> str:
        """ "removed in TF 2.9" when the release is known, else "removed after TF 2.4 (gone by 2.21)"."""
        if self.present_in is not None and _next_release(self.present_in) == self.absent_from:
            return f"removed in TF {release_text(self.absent_from)}"
        if self.present_in is None:
            return f"absent from TF {release_text(self.absent_from)}"
        return f"removed after TF {release_text(self.present_in)} (gone by {release_text(self.absent_from)})"


def _next_release(release: Release) -> Release | None:
    index = KNOWN_RELEASES.index(release) if release in KNOWN_RELEASES else -1
    return KNOWN_RELEASES[index + 1] if 0 <= index < len(KNOWN_RELEASES) - 1 else None


# Measured on TF 2.21 / tf_keras 2.21 / Keras 3.15 (absent there), and read from the Keras and TensorFlow sources of
# the older releases named in `evidence`. Where no source pins the release that removed an API, the bounds stay
# apart rather than guessed.
REMOVALS: tuple[Removal, ...] = (
    Removal(
        "keras.mixed_precision.experimental",
        present_in=(2, 8),
        absent_from=(2, 9),
        added_in=(1, 14),
        evidence="keras-team/keras: keras/mixed_precision/policy.py exports keras.mixed_precision.experimental.Policy "
        "at tag v2.8.0 and not at v2.9.0 (commit 8ecef127 'Remove experimental Keras mixed precision API')",
    ),
    Removal(
        "tf.train.experimental.enable_mixed_precision_graph_rewrite",
        present_in=(2, 4),
        absent_from=(2, 21),
        added_in=(1, 14),
        evidence="tensorflow/python/training/experimental/mixed_precision.py of TF 2.4.0 still exports it (deprecated "
        "2020-11-30); absent from the TF 2.21 namespace (measured)",
    ),
    Removal(
        "tf.train.experimental.disable_mixed_precision_graph_rewrite",
        present_in=(2, 4),
        absent_from=(2, 21),
        added_in=(1, 14),
        evidence="exported with enable_mixed_precision_graph_rewrite; absent from TF 2.21 (measured)",
    ),
    Removal(
        "tf.train.experimental.LossScale",
        present_in=(2, 0),
        absent_from=(2, 21),
        added_in=(1, 14),
        evidence="listed in the TF 2.0 API docs of tf.train.experimental; absent from TF 2.21 (measured)",
    ),
    Removal(
        "tf.train.experimental.DynamicLossScale",
        present_in=(2, 0),
        absent_from=(2, 21),
        added_in=(1, 14),
        evidence="listed in the TF 2.0 API docs of tf.train.experimental; absent from TF 2.21 (measured)",
    ),
    Removal(
        "tf.train.experimental.FixedLossScale",
        present_in=(2, 0),
        absent_from=(2, 21),
        added_in=(1, 14),
        evidence="listed in the TF 2.0 API docs of tf.train.experimental; absent from TF 2.21 (measured)",
    ),
    Removal(
        "tf.train.experimental.MixedPrecisionLossScaleOptimizer",
        present_in=(1, 15),
        absent_from=(2, 0),
        added_in=(1, 14),
        evidence="a v1-only export (the TF 1.x API): only tf.compat.v1.train.experimental has it in TF 2.x "
        "(measured on TF 2.21)",
    ),
    Removal(
        "tf.mixed_precision",
        present_in=(2, 8),
        absent_from=(2, 21),
        added_in=(2, 1),
        evidence="the TF2 module held only `experimental`; keras 2.8 (paired with TF 2.8) still uses "
        "tf.mixed_precision.experimental.DynamicLossScale; keras "
        "commit 4b5ea491 (March 2022) moved to tf.compat.v1 because 'the TF2 versions are being removed soon'; "
        "absent from TF 2.21 (measured)",
    ),
    Removal(
        "tf.contrib",
        present_in=(1, 15),
        absent_from=(2, 0),
        evidence="tf.contrib was removed in TensorFlow 2.0",
    ),
)


@functools.lru_cache(maxsize=4096)  # asked for every imported API name of every file
def removal_of(name: str) -> Removal | None:
    """The table's entry for a canonical name (the longest matching prefix)."""
    best = None
    for removal in REMOVALS:
        matches = name == removal.api or name.startswith(removal.api + ".")
        if matches and (best is None or len(removal.api) > len(best.api)):
            best = removal
    return best
