"""mpdoctor.spellings.Spellings answers as `re.search(pattern, text) is not None` does, for the preconditions the
rules and the target declare (and the general patterns it falls back to)."""

from __future__ import annotations

import re

import pytest

from mpdoctor.registry import static_checks
from mpdoctor.spellings import Spellings

PATTERNS = [
    r"float16|half",
    r"KerasLayer|TFSMLayer",
    r"\bops\b|set_dtype_policy|Optimizer",
    r"train\.\w+Optimizer|contrib",  # not words only: searched as a regex
    r"(?i)noqa",
]
TEXTS = [
    "",
    "import keras\nkeras.ops.softmax(x)\n",
    "from keras import ops\n",
    "x = tf.stops(y)\nops_count = 1\n",  # `ops` inside other words: no word match
    "opt = tf.train.AdamOptimizer(0.1)\n",
    "opt = keras.optimizers.Adam()\n",
    "layer = hub.KerasLayer(url)\n",
    "policy = 'mixed_bfloat16'\n",
    "x = y.half()\n",
    "# NOQA\n",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_answer_as_re_search(pattern):
    spellings = Spellings(pattern)
    for text in TEXTS:
        assert spellings.found_in(text) == (re.search(pattern, text) is not None), (pattern, text)


def test_every_registered_precondition_agrees_with_its_regex():
    for check in static_checks():
        for spellings in check.requires:
            for text in TEXTS:
                assert spellings.found_in(text) == (re.search(spellings.pattern, text) is not None)
