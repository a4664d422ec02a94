"""The TensorFlow/Keras a file is judged against: one resolved target per file, and where each part came from.

Sources, strongest first (docs in README "Which TensorFlow and Keras a file targets"):

1. the configuration: `--target-tensorflow` / `--keras-version`, `[tool.mpdoctor] target-tensorflow` / `keras-version`;
2. the project's own declarations (mpdoctor.project.declared), from the file's directory upwards to the project root:
   the closest directory that declares anything decides;
3. the file's own evidence (mpdoctor.project.evidence): `import tf_keras` or `TF_USE_LEGACY_KERAS=1` set in the
   file (Keras 2), APIs that exist only in Keras 3 (`keras.ops`, `keras.config.set_dtype_policy`,
   `optimizer.scale_loss`...) or only in the Keras 2 era (`tf.compat.v1` graph code), TF1-only APIs (`tf.contrib`,
   `tf.Session`...). An API a rule reports on the other target (`get_scaled_loss`, the `experimental` mixed
   precision API, `tf.contrib.mixed_precision`) is never evidence: with nothing declared the file is judged against
   the installed environment, and MP003 notes what it looks written for;
4. the installed environment (package metadata, TF_USE_LEGACY_KERAS), last.

The TensorFlow range comes from the first of 1, 2, 3 (TF1 APIs), 4 that says anything. The Keras major follows from
the range (`tf.keras` is Keras 3 from TF 2.16 on), except that the file's own choice of Keras wins: tf_keras, or a
Keras-3-only API (new code proves a new Keras, whatever an older pin says: MP003 then reports the disagreement). A
Keras-2-era API (`tf.compat.v1` graph code) decides only where no pin or configuration does, and a range that allows
both Keras versions is judged as Keras 3 with lower confidence.

Never executes anything: project files are read as text or AST. Declarations are cached per directory for one run
(`new_run()` starts another).
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mpdoctor.facts.keras_semantics import legacy_keras_env
from mpdoctor.facts.tf_releases import (
    FIRST_KERAS3,
    TF2_RELEASES,
    Release,
    keras_package_major,
    known_releases,
    parse_release,
    range_text,
    release_text,
    tf_keras_major,
)
from mpdoctor.project import environment
from mpdoctor.project.backend import BACKEND_ENV, BACKEND_KINDS, resolve_backend
from mpdoctor.project.backend import TENSORFLOW as TENSORFLOW_BACKEND
from mpdoctor.project.declared import declarations_in, is_project_root
from mpdoctor.project.dockerfiles import is_dockerfile
from mpdoctor.project.environment import KerasVersion
from mpdoctor.project.evidence import FLAVOUR_TF_KERAS_MODULE, Clue, FileEvidence, ModulesKeras, file_evidence
from mpdoctor.project.requirements import LEGACY_ENV, TENSORFLOW, Declaration, keras_majors_for, releases_for, shown

# Where a part of the target came from, strongest first.
CONFIG, DECLARED, FILE, ENVIRONMENT, DEFAULT = "config", "declared", "file", "environment", "default"
PROJECT = "project"  # the modules that run with the file (mpdoctor.project.running_together): after FILE


# ------------------------------------------------------------------------------------------- the project


@dataclass(frozen=True)
class Project:
    """What the closest declaring directory says (None fields: nothing declared)."""

    directory: str | None
    declarations: tuple[Declaration, ...] = ()
    notes: tuple[str, ...] = ()  # project files up to it that could not be read, and why
    # Keras 3 backend declarations (jax, torch, `ENV KERAS_BACKEND`) up to it, nearest first: they never choose
    # the declaring directory (a folder that lists only torch does not hide its parent's TensorFlow pin).
    backends: tuple[Declaration, ...] = ()

    def of(self, kind: str) -> list[Declaration]:
        return [d for d in self.declarations if d.kind == kind]

    @functools.cached_property
    def judged(self) -> tuple[tuple[Declaration, ...], tuple[Declaration, ...], frozenset[Release]]:
        """(the TensorFlow declarations the file is judged against, those set aside, the releases they allow).
        Declarations of several files all hold at once (requirements.txt says >=1.11, the Dockerfile's image is
        1.15: 1.15). Files are taken nearest first (see `_nearness`); a file that allows no release in common with
        those taken is set aside: a conflict, said by MP003, never a silent union of two TensorFlow lines. Within
        one file, declarations with nothing in common are alternatives (extras for two TensorFlow lines)."""
        usable = [d for d in self.of(TENSORFLOW) if d.releases]
        kept: list[Declaration] = []
        aside: list[Declaration] = []
        releases: frozenset[Release] | None = None
        for group in sorted(_by_file(usable), key=lambda g: self._nearness(g[0])):
            these = _file_releases(group)
            if releases is None or releases & these:
                releases = these if releases is None else releases & these
                kept += group
            else:
                aside += group
        return tuple(kept), tuple(aside), releases or frozenset()

    def _nearness(self, declaration: Declaration) -> tuple[bool, bool]:
        """Files of the declaring directory before those of its `docker/` and `requirements/` folders; the
        project's own requirements before a Dockerfile (a `pip install` in the image replaces its TensorFlow).
        Then the order they were read in (pyproject.toml, setup.cfg, setup.py, Pipfile, conda, requirements)."""
        folder = os.path.dirname(declaration.file) or "."
        return folder != self.directory, is_dockerfile(os.path.basename(declaration.file))

    @functools.cached_property
    def tensorflow(self) -> tuple[frozenset[Release], str, str] | None:
        """(releases, range text, origins) of the TensorFlow declarations judged against (`judged`)."""
        kept, _aside, releases = self.judged
        if not kept:
            return None
        texts = list(dict.fromkeys(_declared_text(d) for d in kept))
        origins = ", ".join(dict.fromkeys(d.origin for d in kept))
        if len(texts) == 1:
            return releases, texts[0], origins
        if not frozenset.intersection(*(d.releases or frozenset() for d in kept)):  # alternatives of one file
            return releases, " | ".join(texts), origins
        return releases, range_text(releases), origins

    @functools.cached_property
    def conflict(self) -> str | None:
        """MP003's message when declarations were set aside (`judged`), else None."""
        kept, aside, releases = self.judged
        if not aside:
            return None
        chosen, other = kept[0], aside[0]
        near, far = self._nearness(chosen), self._nearness(other)
        if near[0] != far[0]:
            why = "the nearer to this file"
        elif near[1] != far[1]:
            why = "a project's requirements before its Docker image (installing them replaces the image's TensorFlow)"
        else:
            why = "read first (pyproject.toml, setup.cfg, setup.py, Pipfile, conda, requirements, Dockerfiles)"
        return (
            f"the project declares TensorFlow releases with none in common: {chosen.origin} says {chosen.text} "
            f"(TensorFlow {range_text(releases)}), {other.origin} says {other.text} (TensorFlow "
            f"{range_text(other.releases or ())}); judged against {chosen.file}, {why}"
        )


def _by_file(declarations: list[Declaration]) -> list[list[Declaration]]:
    groups: dict[str, list[Declaration]] = {}
    for declaration in declarations:
        groups.setdefault(declaration.file, []).append(declaration)
    return list(groups.values())


def _file_releases(group: list[Declaration]) -> frozenset[Release]:
    """What one file's declarations allow together; alternatives (nothing in common) allow any of them."""
    allowed = [d.releases or frozenset() for d in group]
    return frozenset.intersection(*allowed) or frozenset().union(*allowed)


_UNPINNED = "any version (unpinned)"


def _declared_text(declaration: Declaration) -> str:
    if declaration.text.startswith("FROM "):
        return range_text(declaration.releases or ())
    return declaration.specifier or _UNPINNED


_generation = 0


def generation() -> int:
    """This run's number: caches of project files keyed by it are read afresh by the next run."""
    return _generation


def new_run() -> None:
    """Forget the declarations read so far (a new run reads project files afresh)."""
    global _generation
    _generation += 1


@functools.lru_cache(maxsize=4096)
def _declarations(directory: str, generation: int) -> tuple[tuple[Declaration, ...], tuple[str, ...]]:
    """The declarations of one directory's project files, and notes on those that could not be read."""
    notes: list[str] = []
    return tuple(declarations_in(Path(directory), notes)), tuple(notes)


@functools.lru_cache(maxsize=4096)
def _project(directory: str, generation: int) -> Project:
    current = Path(directory)
    notes: tuple[str, ...] = ()
    backends: tuple[Declaration, ...] = ()
    while True:
        found, unread = _declarations(str(current), generation)
        notes += unread
        backends += tuple(d for d in found if d.kind in BACKEND_KINDS)
        found = tuple(d for d in found if d.kind not in BACKEND_KINDS)
        if found:
            return Project(shown(current) or ".", found, notes, backends)
        if is_project_root(current) or current.parent == current:
            return Project(None, (), notes, backends)
        current = current.parent


def project_for(path: str) -> Project:
    """The declarations that count for a file: those of the closest directory, from the file's own upwards to the
    project root (a directory with .git, pyproject.toml, setup.py or setup.cfg), that declares anything."""
    return _project(_real_directory(path), _generation)


def _real_directory(path: str) -> str:
    """`Path(path).resolve().parent`, resolving each directory once per run: a file of a tree of thousands
    costs one lstat (is it a link to elsewhere?) instead of one per component of its path."""
    if os.path.islink(path):
        return str(Path(path).resolve().parent)
    directory = os.path.dirname(path)  # not normalised: `link/..` must be resolved as the file system has it
    return _resolved_directory(os.path.join(os.getcwd(), directory), _generation)


@functools.lru_cache(maxsize=4096)
def _resolved_directory(directory: str, generation: int) -> str:
    return str(Path(directory).resolve())


# ---------------------------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class Overrides:
    """The configuration's part (source 1)."""

    target_tensorflow: str | None = None
    target_tensorflow_origin: str = "--target-tensorflow"
    keras_version: int | None = None
    keras_version_origin: str = "--keras-version"
    keras_backend: str | None = None  # the configured Keras 3 backend (the trace's `keras-backend` key)
    keras_backend_origin: str = "[tool.mpdoctor] keras-backend"


@dataclass(frozen=True)
class Conflict:
    """The target disagrees with itself: reported as MP003 at `line` (None: the whole file)."""

    message: str
    line: int | None = None
    declared: bool = False  # between the project's declarations (not between a pin and the code)
    note: bool = False  # not a disagreement of the target: what the file looks written for (flagged APIs)


@dataclass(frozen=True)
class Target:
    releases: frozenset[Release]  # the TensorFlow releases in range
    tensorflow_text: str  # the range as declared: ">=2.12,<2.16", "2.21"
    tensorflow_origin: str  # "requirements.txt:3", "--target-tensorflow", "the installed TensorFlow"
    tensorflow_source: str  # CONFIG | DECLARED | FILE | ENVIRONMENT | DEFAULT
    keras_major: int
    keras_majors: frozenset[int]  # every Keras the target allows this file
    keras_origin: str
    keras_source: str
    keras_derived: bool  # the Keras follows from the TensorFlow range (not chosen by the file or configured)
    flavour: str  # "tf_keras" | "keras" | "tf.keras"
    hub: bool
    hub_origin: str
    installed: Release | None
    installed_keras_major: int | None  # this file's Keras in the installed environment
    conflicts: tuple[Conflict, ...] = ()
    clues: tuple[Clue, ...] = ()
    project: Project = field(default_factory=lambda: Project(None))
    backend: str = TENSORFLOW_BACKEND  # Keras 3's backend: "tensorflow" | "jax" | "torch" (mpdoctor.project.backend)
    backend_source: str = DEFAULT
    backend_origin: str = "Keras's default"

    # ---- reading it

    @property
    def keras_certain(self) -> bool:
        return len(self.keras_majors) == 1 and self.keras_source != DEFAULT

    @property
    def keras_version(self) -> KerasVersion:
        return KerasVersion(self.keras_major, self.keras_origin, self.keras_certain)

    def at_least(self, release: Release) -> bool:
        """Every release of the target is at least `release`."""
        return all(r >= release for r in self.releases)

    @property
    def installed_in_range(self) -> bool:
        return self.installed is None or self.installed in self.releases

    @property
    def differs_from_installed(self) -> bool:
        """The target is not what is installed: messages then say which target they assume."""
        if self.installed is None:
            return self.tensorflow_source != DEFAULT
        return self.installed not in self.releases or self.keras_major != self.installed_keras_major

    @property
    def tensorflow_summary(self) -> str:
        if self.tensorflow_source == ENVIRONMENT:
            return f"TensorFlow {self.tensorflow_text} (installed)"
        if self.tensorflow_source == DEFAULT:
            return "any TensorFlow (none declared or installed)"
        return f"TensorFlow {self.tensorflow_text} from {self.tensorflow_origin}"

    def summary(self) -> str:
        """One line for messages: "TensorFlow >=2.12,<2.16 from requirements.txt:3 -> Keras 2"."""
        keras = f"Keras {self.keras_major}" if self.keras_certain else f"Keras {self.keras_major} (Keras 2 or 3)"
        how = "" if self.keras_derived else f" ({self.keras_origin})"
        return f"{self.tensorflow_summary} -> {keras}{how}"

    def note(self) -> str:
        """ " (target: ...)" when the target is not simply the installed environment, else ""."""
        return f" (target: {self.summary()})" if self.differs_from_installed else ""

    def to_json(self) -> dict:
        return {
            "tensorflow": {
                "range": self.tensorflow_text,
                "releases": [release_text(r) for r in sorted(self.releases)],
                "source": self.tensorflow_source,
                "origin": self.tensorflow_origin,
            },
            "keras": {
                "major": self.keras_major,
                "majors": sorted(self.keras_majors),
                "certain": self.keras_certain,
                "flavour": self.flavour,
                "source": self.keras_source,
                "origin": self.keras_origin,
                "derived": self.keras_derived,
            },
            "hub": {"present": self.hub, "origin": self.hub_origin},
            "installed": {
                "tensorflow": release_text(self.installed) if self.installed else None,
                "keras_major": self.installed_keras_major,
            },
            "differs_from_installed": self.differs_from_installed,
            "conflicts": [
                {"message": c.message, "line": c.line, **({"note": True} if c.note else {})} for c in self.conflicts
            ],
            # Only another backend than TensorFlow: the reports of TensorFlow files stay as they were.
            **({"backend": self._backend_json()} if self.backend != TENSORFLOW_BACKEND else {}),
        }

    def _backend_json(self) -> dict:
        return {"name": self.backend, "source": self.backend_source, "origin": self.backend_origin}

    @classmethod
    def from_json(cls, data: dict) -> Target:
        """A target read back from a JSON report (`mpdoctor merge`): what to_json wrote; the declarations read and
        the file's clues are not in the report, so `describe()` of it lists none."""
        tensorflow, keras, hub, installed = data["tensorflow"], data["keras"], data["hub"], data["installed"]
        releases = frozenset(_release(text) for text in tensorflow["releases"])
        backend = data.get("backend") or {"name": TENSORFLOW_BACKEND, "source": DEFAULT, "origin": "Keras's default"}
        return cls(
            releases=releases,
            tensorflow_text=str(tensorflow["range"]),
            tensorflow_origin=str(tensorflow["origin"]),
            tensorflow_source=str(tensorflow["source"]),
            keras_major=int(keras["major"]),
            keras_majors=frozenset(int(m) for m in keras["majors"]),
            keras_origin=str(keras["origin"]),
            keras_source=str(keras["source"]),
            keras_derived=bool(keras.get("derived", False)),
            flavour=str(keras["flavour"]),
            hub=bool(hub["present"]),
            hub_origin=str(hub["origin"]),
            installed=_release(installed["tensorflow"]) if installed["tensorflow"] else None,
            installed_keras_major=installed["keras_major"],
            conflicts=tuple(
                Conflict(str(c["message"]), c.get("line"), note=bool(c.get("note", False)))
                for c in data.get("conflicts", ())
            ),
            backend=str(backend["name"]),
            backend_source=str(backend["source"]),
            backend_origin=str(backend["origin"]),
        )

    def describe(self) -> list[str]:
        """`check --show-target`: the target and every source considered."""
        lines = [
            f"  TensorFlow: {self.tensorflow_text}  [{self.tensorflow_source}: {self.tensorflow_origin}]",
            f"    releases: {range_text(self.releases)}",
            f"  Keras: {self.keras_major}{'' if self.keras_certain else ' (the range allows Keras 2 and 3)'}  "
            f"[{self.keras_source}: {self.keras_origin}]",
            f"    the file's Keras: {_FLAVOUR_TEXT[self.flavour]}",
            *(
                [f"    backend: {self.backend}  [{self.backend_source}: {self.backend_origin}]"]
                if self.keras_major == 3
                else []
            ),
            f"  tensorflow-hub: {'yes' if self.hub else 'no'}  [{self.hub_origin}]",
        ]
        installed = release_text(self.installed) if self.installed else "not installed"
        keras = f", this file's Keras there: {self.installed_keras_major}" if self.installed_keras_major else ""
        lines.append(f"  installed: TensorFlow {installed}{keras}")
        if self.project.directory is not None:
            lines.append(f"  declared in {self.project.directory}:")
            aside = self.project.judged[1]
            lines += [
                f"    {d.describe()}{' (set aside: see the conflict)' * (d in aside)}"
                for d in self.project.declarations
            ]
        else:
            lines.append("  declared: nothing (no project file up to the project root declares TensorFlow or Keras)")
        if self.project.backends:
            lines.append("  declared about the Keras backend:")
            lines += [f"    {d.describe()}" for d in self.project.backends]
        lines += [f"  note: {note}" for note in self.project.notes]
        evidence = [c for c in self.clues if not c.flagged]
        if evidence:
            lines.append("  the file's own evidence:")
            lines += [f"    {c.text}" for c in evidence]
        flagged = [c for c in self.clues if c.flagged]
        if flagged:
            lines.append("  not evidence (APIs a rule reports on the other target, so they never choose it):")
            lines += [f"    {c.text}" for c in flagged]
        for conflict in self.conflicts:
            lines.append(f"  {'note' if conflict.note else 'conflict'}: {conflict.message}")
        return lines


def _release(text: str) -> Release:
    release = parse_release(str(text))
    if release is None:
        raise ValueError(f"not a TensorFlow release: {text!r}")
    return release


_FLAVOUR_TEXT = {
    "tf_keras": "tf_keras (Keras 2 whatever the TensorFlow release)",
    "keras": "the keras package",
    FLAVOUR_TF_KERAS_MODULE: "tf.keras (Keras 2 before TF 2.16, Keras 3 from 2.16 unless TF_USE_LEGACY_KERAS=1)",
}


def resolve(
    project: Project, evidence: FileEvidence, overrides: Overrides | None = None, modules: ModulesKeras | None = None
) -> Target:
    """Combine the four sources (see the module docstring); `modules`: what the modules that run with the file choose
    (one project, one target), for a `tf.keras` file whose own code says nothing."""
    here = _Environment(
        environment.tensorflow_version(),
        legacy_keras_env(),
        environment.standalone_keras_major(),
        environment.hub_installed(),
        environment.keras_backend(),
    )
    if (
        evidence.flavour != FLAVOUR_TF_KERAS_MODULE
        or not evidence.imports_tensorflow
        or evidence.of("keras2")
        or evidence.of("keras3")
    ):
        modules = None  # the file's own code decides, or it has no Keras to decide
    return _resolved(project, evidence, overrides or Overrides(), here, modules)


class _Environment(NamedTuple):
    """The installed environment as the resolution reads it, a part of its cache key: another TF_USE_LEGACY_KERAS (or
    a test's installed TensorFlow) is a miss."""

    installed: Release | None
    legacy_env: bool
    keras_major: int | None  # of the keras package: in the key only (_keras_of and _installed_keras ask for it)
    hub: bool
    keras_backend: tuple[str, str] | None  # (backend, origin) KERAS_BACKEND or keras.json selects


# Most files of a tree have the same project, evidence and overrides: one Target object for all of them, resolved
# once (a sixtieth of a 2,000-file static run) and pickled once per chunk by the static workers.
@functools.lru_cache(maxsize=1024)
def _resolved(
    project: Project, evidence: FileEvidence, overrides: Overrides, env: _Environment, modules: ModulesKeras | None
) -> Target:
    installed = env.installed
    releases, tf_text, tf_origin, tf_source = _tensorflow_range(project, evidence, overrides, installed)
    conflicts: list[Conflict] = []
    if tf_source == DECLARED and project.conflict:
        conflicts.append(Conflict(project.conflict, None, declared=True))

    legacy_declared = project.of(LEGACY_ENV)
    legacy_modules = modules is not None and modules.legacy
    legacy = bool(legacy_declared) or legacy_modules or env.legacy_env  # the environment's variable is the weakest
    if legacy_declared:
        legacy_origin = f"{legacy_declared[0].text} at {legacy_declared[0].origin}"
    elif modules is not None and legacy_modules:
        legacy_origin = modules.origin
    else:
        legacy_origin = "TF_USE_LEGACY_KERAS=1 in the environment"
    derived = _keras_of(evidence.flavour, releases, legacy, project, tf_source)
    derived_text = _derived_text(evidence.flavour, derived, legacy, legacy_origin, releases, tf_source)

    keras2, keras3 = evidence.of("keras2"), evidence.of("keras3")
    pinned = tf_source in (CONFIG, DECLARED) or (evidence.flavour == "keras" and project.of("keras"))
    # What the pins alone say (without the environment's TF_USE_LEGACY_KERAS), for conflicts with the code.
    pinned_majors = _keras_of(evidence.flavour, releases, bool(legacy_declared), project, tf_source)
    if overrides.keras_version:
        majors, origin, source = frozenset({overrides.keras_version}), overrides.keras_version_origin, CONFIG
    elif evidence.flavour == "tf_keras":
        majors, origin, source = frozenset({2}), evidence.selection, FILE
    elif keras3:
        majors, origin, source = frozenset({3}), f"this file uses {keras3[0].text}", FILE
        if pinned and 3 not in pinned_majors:
            conflicts.append(
                Conflict(
                    f"{tf_origin} says {_range_phrase(tf_text, releases)} (Keras 2 for this file) but this file uses "
                    f"{keras3[0].text}: judged as Keras 3",
                    keras3[0].line,
                )
            )
    elif keras2 and (not pinned or derived == {2, 3}):
        majors, origin, source = frozenset({2}), f"this file uses {keras2[0].text}", FILE
    elif modules is not None and not modules.legacy and (not pinned or derived == {2, 3}):
        majors, origin, source = frozenset({modules.major}), modules.origin, PROJECT
    else:
        majors, origin, source = derived, derived_text, tf_source
    derived_keras = source == tf_source and origin == derived_text
    tf1 = evidence.of("tf1")
    if tf1 and tf_source in (CONFIG, DECLARED) and not any(r[0] == 1 for r in releases):
        conflicts.append(
            Conflict(
                f"{tf_origin} says {_range_phrase(tf_text, releases)} but this file uses {tf1[0].text}",
                tf1[0].line,
            )
        )
    major = 3 if 3 in majors else 2
    # An unpinned `tensorflow` chooses no more than nothing declared (a range that allows both is a choice).
    open_declaration = source == tf_source == DECLARED and tf_text == _UNPINNED and majors == frozenset({2, 3})
    if CONFIG not in (source, tf_source) and (DECLARED not in (source, tf_source) or open_declaration):
        conflicts += _looks_written_for_another(evidence, major, releases, installed, open_declaration)
    hub, hub_origin = _hub(project, evidence, env)
    declared_backends = [(d.kind, d.specifier if d.kind == BACKEND_ENV else d.text, d.origin) for d in project.backends]
    configured = (overrides.keras_backend, overrides.keras_backend_origin) if overrides.keras_backend else None
    backend = resolve_backend(
        major, evidence.backend, declared_backends, bool(project.of(TENSORFLOW)), env.keras_backend, configured
    )

    return Target(
        releases=releases,
        tensorflow_text=tf_text,
        tensorflow_origin=tf_origin,
        tensorflow_source=tf_source,
        keras_major=major,
        keras_majors=majors,
        keras_origin=origin,
        keras_source=source,
        keras_derived=derived_keras,
        flavour=evidence.flavour,
        hub=hub,
        hub_origin=hub_origin,
        installed=installed,
        installed_keras_major=_installed_keras(evidence.flavour),
        conflicts=tuple(conflicts),
        clues=evidence.clues,
        project=project,
        backend=backend.name,
        backend_source=backend.source,
        backend_origin=backend.origin,
    )


def _looks_written_for_another(
    evidence: FileEvidence, major: int, releases: frozenset[Release], installed: Release | None, unpinned: bool
) -> list[Conflict]:
    """Nothing declares the target (or an `unpinned` declaration allows Keras 2 and 3), and the file's flagged APIs
    say it was written for another Keras or TensorFlow than the one it is judged against (the installed one): the
    rules report those APIs, and one note says how to be judged against the file's own era instead."""
    if unpinned:
        declare = "pin TensorFlow (its declaration allows any release: Keras 2 and 3) to be judged against it"
    else:
        declare = "declare the target (requirements, pyproject) to be judged against it"
    flagged = evidence.flagged("keras2") + evidence.flagged("tf1")
    keras2 = [c for c in flagged if c.what in ("get_scaled_loss", "get_unscaled_gradients")]
    if keras2 and major == 3:
        first = keras2[0]
        if evidence.flavour == "keras":
            where, switch = "keras", "or import tf_keras (Keras 2) instead of keras"
        else:
            where, switch = "tf.keras", "or set TF_USE_LEGACY_KERAS=1 with tf_keras installed"
        message = (
            f"this file looks written for Keras 2 ({first.what}, line {first.line}) but {where} here is Keras 3; "
            f"{declare}, {switch}"
        )
        return [Conflict(message, first.line, note=True)]
    here = f"TensorFlow {release_text(installed)} is installed here" if installed else "the target is TensorFlow 2"
    for era, what, outside in (
        ("TensorFlow < 2.9", "mixed_precision.experimental", lambda r: r >= (2, 9)),
        ("TensorFlow 1", "tf.contrib.mixed_precision", lambda r: r[0] >= 2),
    ):
        found = [c for c in flagged if c.what == what]
        if found and all(outside(r) for r in releases):
            message = f"this file looks written for {era} ({what}, line {found[0].line}) but {here}; {declare}"
            return [Conflict(message, found[0].line, note=True)]
    return []


def _hub(project: Project, evidence: FileEvidence, env: _Environment) -> tuple[bool, str]:
    """Whether the target has tensorflow-hub, and why: declared, imported by the file, or installed."""
    hub_declared = project.of("tensorflow-hub")
    if hub_declared:
        return True, hub_declared[0].origin
    if evidence.imports_hub:
        return True, "this file imports tensorflow_hub"
    if env.hub:
        return True, "installed"
    return False, "not declared, imported or installed"


def _tensorflow_range(
    project: Project, evidence: FileEvidence, overrides: Overrides, installed: Release | None
) -> tuple[frozenset[Release], str, str, str]:
    universe = frozenset(known_releases(installed))
    if overrides.target_tensorflow:
        releases = releases_for(overrides.target_tensorflow) or frozenset()
        return releases, overrides.target_tensorflow, overrides.target_tensorflow_origin, CONFIG
    declared = project.tensorflow
    if declared is not None:
        releases, text, origin = declared
        if installed is not None and installed not in TF2_RELEASES and any(r >= (2, 0) for r in releases):
            releases = releases | _newer_allowed(installed, text)  # a future TF the specifier also allows
        return releases & universe, text, origin, DECLARED
    unread = project.of(TENSORFLOW)
    if unread:  # declared, but nothing mpdoctor can read (an image tag it does not know): not the installed one
        why = unread[0].note or "nothing mpdoctor can read"
        return frozenset(r for r in universe if r[0] >= 2), "any 2.x", f"{unread[0].origin} ({why})", DECLARED
    tf1 = evidence.of("tf1")
    if tf1:
        return frozenset(r for r in universe if r[0] == 1), "1.x", f"this file's use of {tf1[0].text}", FILE
    if installed is not None:
        return frozenset({installed}), release_text(installed), "the installed TensorFlow", ENVIRONMENT
    return frozenset(TF2_RELEASES), "any", "nothing declares TensorFlow and none is installed", DEFAULT


def _newer_allowed(installed: Release, specifier: str) -> frozenset[Release]:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        allowed = specifier == "" or SpecifierSet(specifier).contains(f"{installed[0]}.{installed[1]}.0")
    except InvalidSpecifier:
        allowed = False
    return frozenset({installed}) if allowed else frozenset()


def _keras_of(flavour: str, releases: frozenset[Release], legacy: bool, project: Project, source: str) -> frozenset:
    if flavour == "tf_keras":
        return frozenset({2})
    if flavour == "keras":
        pins = project.of("keras")
        if pins:
            return frozenset().union(*(keras_majors_for(d.specifier) for d in pins))
        if source == ENVIRONMENT:
            return frozenset({environment.standalone_keras_major() or 3})
        return frozenset(keras_package_major(r) for r in releases) or frozenset({3})
    return frozenset(tf_keras_major(r, legacy) for r in releases) or frozenset({3})


def _derived_text(
    flavour: str, majors: frozenset, legacy: bool, legacy_origin: str, releases: frozenset, source: str
) -> str:
    if flavour == "keras":
        if source == ENVIRONMENT:
            return "the installed keras package"
        return "the keras package that comes with TF " + ("<= 2.15" if majors == {2} else ">= 2.16")
    if majors == {2, 3}:
        return "tf.keras is Keras 2 before TF 2.16 and Keras 3 from 2.16: the range allows both"
    if legacy and any(r >= FIRST_KERAS3 for r in releases):
        return f"tf.keras is tf_keras: {legacy_origin}"
    version = "before TF 2.16" if 2 in majors else "from TF 2.16"
    return f"tf.keras is Keras {next(iter(majors))} {version}"


def _range_phrase(text: str, releases: frozenset[Release]) -> str:
    return f"TensorFlow {text}" + (f" ({range_text(releases)})" if text != range_text(releases) else "")


def _installed_keras(flavour: str) -> int | None:
    if flavour == "tf_keras":
        return 2
    if flavour == "keras":
        return environment.standalone_keras_major()
    if environment.tensorflow_version() is None:
        return None
    return environment.tf_keras_version().major


def target_for(
    path: str,
    tree: ast.AST,
    text: str,
    overrides: Overrides | None = None,
    imports=None,
    nodes=None,
    modules: ModulesKeras | None = None,
) -> Target:
    """The resolved target of one file (its project's declarations are cached per directory)."""
    return resolve(project_for(path), file_evidence(tree, text, imports, nodes), overrides, modules)
