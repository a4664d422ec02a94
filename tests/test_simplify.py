"""Artifacts of mechanical fixes are simplified away on the lines a fix changed (mpdoctor/fix/simplify.py)."""

from __future__ import annotations

from mpdoctor.fix.simplify import simplify_artifacts

ORIGINAL = """\
def step(amp, g, s, opt):
    g = opt.get_unscaled_gradients(g)
    if amp:
        g = opt.get_unscaled_gradients(g)
    if amp:
        g = opt.get_unscaled_gradients(g)
    else:
        print(1)
    if amp:
        gradients = opt.get_unscaled_gradients(s)
    else:
        gradients = s
    h = g if amp else opt.u(g)
    k = g if f() else opt.u(g)
    y = y  # the user's own: not touched
    return g, h, k, gradients
"""


def test_self_assignments_and_same_armed_conditionals_go_on_changed_lines_only():
    fixed = (
        ORIGINAL.replace("opt.get_unscaled_gradients(g)", "g")
        .replace("opt.u(g)", "g")
        .replace("opt.get_unscaled_gradients(s)", "s")
    )
    assert simplify_artifacts(ORIGINAL, fixed) == (
        "def step(amp, g, s, opt):\n"
        "    if amp:\n"
        "        pass\n"
        "    else:\n"
        "        print(1)\n"
        "    gradients = s\n"
        "    h = g\n"
        "    k = g if f() else g\n"  # the call in the condition may matter: kept
        "    y = y  # the user's own: not touched\n"
        "    return g, h, k, gradients\n"
    )


def test_nothing_changed_nothing_simplified():
    assert simplify_artifacts(ORIGINAL, ORIGINAL) == ORIGINAL
