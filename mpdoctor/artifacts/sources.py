"""Any checkpoint or weights file, opened as one kind of source, and its listing (`read_checkpoint`).

Formats (`read_checkpoint(path).format`):
- ``tf2-object``: TF2 object-based checkpoint (`tf.train.Checkpoint`, Keras 2 `save_weights` in TF format); every
  variable also has the object path from the checkpoint's object graph.
- ``tf1-name``: TF1 name-based checkpoint (`tf.compat.v1.train.Saver`); keys are the variable names.
- ``keras2-h5``: Keras 2 `.h5` (`model.save("m.h5")` or `save_weights("w.h5")`); keys are the HDF5 dataset paths.
- ``keras3-weights-h5``: Keras 3 `.weights.h5`; keys are the HDF5 dataset paths (`layers/dense/vars/0`).
- ``keras3-archive``: Keras 3 `.keras` zip archive; the weights are its `model.weights.h5` member.

Dtypes and shapes come from the index or the HDF5 metadata; a listing reads no tensor.
"""

from __future__ import annotations

import contextlib
import os

from mpdoctor.artifacts.errors import CheckpointError
from mpdoctor.artifacts.hdf5 import H5Source, open_h5
from mpdoctor.artifacts.locate import Located, locate
from mpdoctor.artifacts.tf_checkpoint import OBJECT_GRAPH_KEY, TFSource, nbytes
from mpdoctor.facts.artifacts import CheckpointListing, CheckpointVariable

FORMAT_DESCRIPTIONS = {
    "tf2-object": "TF2 object-based checkpoint (tf.train.Checkpoint / Keras 2 save_weights, TF format)",
    "tf1-name": "TF1 name-based checkpoint (tf.compat.v1.train.Saver)",
    "keras2-h5": "Keras 2 HDF5 weights (.h5)",
    "keras3-weights-h5": "Keras 3 weights (.weights.h5)",
    "keras3-archive": "Keras 3 archive (.keras)",
}


@contextlib.contextmanager
def open_source(path: str | os.PathLike):
    """Yields (located, source) for a checkpoint or weights file; source is a TFSource or H5Source."""
    located = locate(path)
    if located.kind == "savedmodel":
        raise CheckpointError(
            located.target, "is a SavedModel, not a checkpoint (its variables are the checkpoint variables/variables)"
        )
    if located.kind == "tf":
        yield located, TFSource(located.target)
        return
    with open_h5(located) as (handle, shown):
        yield located, H5Source(located, handle, shown)


def listed_keys(source) -> list[str]:
    """The keys a listing or an audit shows: no object graph, and a Keras export's mirrored variables once."""
    mirrors = getattr(source, "mirrors", set())
    return [k for k in source.all_keys() if k != OBJECT_GRAPH_KEY and k not in mirrors]


def describe(located: Located, source) -> CheckpointListing:
    """The listing of an open source: its variables (no object graph; a Keras export's mirrors once)."""
    variables = []
    counts: dict[str, int] = {}
    total = 0
    for key in listed_keys(source):
        dtype, shape = source.dtypes[key], source.shapes[key]
        size = nbytes(dtype, shape)
        object_path = source.object_paths.get(key) if isinstance(source, TFSource) else None
        variable = CheckpointVariable(key, dtype, shape, object_path, size)
        name = source.name(key) if isinstance(source, H5Source) else None
        if name:
            variable.name = name
        variables.append(variable)
        counts[dtype] = counts.get(dtype, 0) + 1
        total += size or 0
    return CheckpointListing(
        path=located.path,
        format=source.format,
        description=FORMAT_DESCRIPTIONS[source.format],
        location=located.target,
        files=source.files() if isinstance(source, TFSource) else [located.target],
        variables=variables,
        dtypes=dict(sorted(counts.items())),
        total_bytes=total,
        mirrored=len(getattr(source, "mirrors", ())),
    )


def read_checkpoint(path: str | os.PathLike) -> CheckpointListing:
    """Every variable of a checkpoint or weights file from its index/metadata, without reading tensor data: key,
    dtype, shape and size of each; `object_path` for TF2 object-based checkpoints only; Keras 2 .h5 variables also
    carry `name`, the Keras weight name. Raises CheckpointError."""
    with open_source(path) as (located, source):
        return describe(located, source)
