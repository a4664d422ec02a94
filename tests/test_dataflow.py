"""The dtype flow's call table (mpdoctor.static.dataflow) against the facts it is built from."""

from __future__ import annotations

from mpdoctor.facts import op_dtypes
from mpdoctor.static.dataflow import last_part


def test_no_call_name_has_two_ways_to_work_out_its_dtype():
    """The flow looks a call's name up in one table before the name-suffix checks: that is the order the checks
    had as a chain of ifs only while no name is in two sets and none ends in an int-result op's name."""
    groups = [
        op_dtypes.CAST,
        op_dtypes.VALUE | op_dtypes.DEFAULT_FLOAT32,
        op_dtypes.FOLLOW_FIRST,
        op_dtypes.SAME_AS_FIRST,
    ]
    names = [name for group in groups for name in group]
    assert len(names) == len(set(names))
    assert not [name for name in names if last_part(name) in op_dtypes.INT_RESULTS or name == "tf.where"]
