import ast

import pytest

from mpdoctor.config import Config
from mpdoctor.diagnostics import Edit
from mpdoctor.engine import check_source
from mpdoctor.fix.apply import EditConflict, apply_edits, apply_fixes


def test_edits_apply_last_first_with_character_columns():
    text = "a = 'é'; b = f(x)\nc = 2\n"
    edits = [Edit("m.py", 1, 17, 1, 17, ", dtype='float32'"), Edit("m.py", 2, 5, 2, 6, "3")]
    assert apply_edits(text, edits) == "a = 'é'; b = f(x, dtype='float32')\nc = 3\n"


def test_identical_edits_apply_once_and_overlapping_ones_conflict():
    edit = Edit("m.py", 1, 5, 1, 6, "2")
    assert apply_edits("x = 1\n", [edit, edit]) == "x = 2\n"
    with pytest.raises(EditConflict):
        apply_edits("x = 1\n", [Edit("m.py", 1, 1, 1, 6, "y = 3"), edit])


def test_static_fix_on_a_non_ascii_line_lands_on_the_right_character():
    source = (
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([keras.Input((4,)), "
        "keras.layers.Dense(3, activation='softmax', name='wahrscheinlichkeit_ü')])\n"
    )
    diagnostics, error = check_source(source, "m.py", Config())
    assert error is None
    [d] = [d for d in diagnostics if d.code == "MP401"]
    assert d.location.column == source.splitlines()[2].index("keras.layers.Dense") + 1
    fixed = apply_fixes(source, [d])
    ast.parse(fixed)
    assert "name='wahrscheinlichkeit_ü', dtype=\"float32\")" in fixed
    assert not [d for d in check_source(fixed, "m.py", Config())[0] if d.code == "MP401"]
