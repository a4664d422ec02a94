"""Sample batches for mask inputs (trace child, samples.py): an input whose name says `mask` is fed 1 with a padded
tail in the second row, whatever its dtype. A float mask used to get uniform random values, which no real mask holds:
on PyTorch a masked pooling `(1 - mask) * -1e9` then read as an overflow that a 0/1 mask does not make (issue 36)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")  # the trace child's samples need it; the no-TensorFlow stage has none

from mpdoctor.trace.child.samples import Spec, _array  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_a_mask_input_of_any_dtype_is_zeros_and_ones_with_padding(dtype):
    mask = _array(Spec("padding_mask", [None, 8], dtype), 2, None, None, np.random.default_rng(0), 0.0, 1.0)
    assert mask.dtype == np.dtype(dtype) and mask.shape == (2, 8)
    assert mask[0].astype(int).tolist() == [1] * 8
    assert mask[1].astype(int).tolist() == [1] * 6 + [0] * 2


def test_a_float_input_not_named_mask_stays_random():
    values = _array(Spec("features", [None, 8], "float32"), 2, None, None, np.random.default_rng(0), 0.0, 1.0)
    assert len(np.unique(values)) == 16 and np.all((values >= 0) & (values < 1))
