"""The rule catalogue is a contract (docs/RULES.md, a copy of the project's RULES.md): codes never change."""

import re
from pathlib import Path

import pytest

from mpdoctor.registry import all_rules, expand_selector, get_rule

RULES_MD = Path(__file__).parent.parent / "docs" / "RULES.md"
_ROW = re.compile(r"^\| (MP\d{3}) \| ([a-z0-9-]+) \| (error|warning|info) \| ([STA,]+) \| (yes|no) \|", re.M)


def contract():
    # passes in canonical S,T,A order (RULES.md writes "A,T" for some rows)
    return {
        m[1]: (m[2], m[3], "".join(p for p in "STA" if p in m[4]), m[5] == "yes")
        for m in _ROW.finditer(RULES_MD.read_text())
    }


def test_contract_table_is_parsed():
    assert len(contract()) == 35


def test_registry_matches_the_contract_exactly():
    registered = {r.code: (r.name, r.severity.value, r.passes, r.fixable) for r in all_rules()}
    assert registered == contract()


def test_every_rule_is_documented_for_explain():
    for rule in all_rules():
        for field in ("summary", "what", "why", "bad", "good", "fix"):
            assert len(getattr(rule, field).strip()) > 10, (rule.code, field)


@pytest.mark.parametrize(
    "selector,expected",
    [
        ("MP4", {"MP401", "MP402", "MP403", "MP404", "MP405", "MP406", "MP407"}),
        ("mp201", {"MP201"}),
        ("MP20", {"MP201", "MP202", "MP203", "MP207"}),
    ],
)
def test_prefix_selection(selector, expected):
    assert expand_selector(selector) == expected


def test_an_opt_in_rule_is_selected_only_by_its_code():
    from mpdoctor.config import Config, apply_overrides

    assert "MP603" not in expand_selector("ALL") and "MP603" not in expand_selector("MP6")
    assert expand_selector("MP603") == {"MP603"}
    assert expand_selector("MP6", opt_in=True) == {"MP601", "MP602", "MP603"}  # what ignore uses
    config = Config()
    assert not config.enabled("MP603") and config.enabled("MP602")
    apply_overrides(config, "test", extend_select=["MP603"])
    assert config.enabled("MP603")
    apply_overrides(config, "test", ignore=["MP6"])
    assert not config.enabled("MP603")
    config = Config()
    apply_overrides(config, "test", select=["MP603"])
    assert config.select == {"MP603"}


def test_rules_and_explain_say_a_rule_is_opt_in():
    import subprocess
    import sys

    table = subprocess.run([sys.executable, "-m", "mpdoctor", "rules"], capture_output=True, text=True).stdout
    opt_in = {line.split()[0] for line in table.splitlines() if "(opt-in: --extend-select" in line}
    assert opt_in == {"MP603"}
    explain = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "explain", "MP603"], capture_output=True, text=True
    ).stdout
    assert "Opt-in: not in the default selection" in explain and "--extend-select MP603" in explain
    explain = subprocess.run(
        [sys.executable, "-m", "mpdoctor", "explain", "MP602"], capture_output=True, text=True
    ).stdout
    assert "Opt-in" not in explain


@pytest.mark.parametrize("selector", ["MP9", "MP999", "E501", "mp-401", ""])
def test_unknown_selectors_are_rejected(selector):
    with pytest.raises(ValueError):
        expand_selector(selector)


def test_names_are_unique_and_kebab_case():
    names = [r.name for r in all_rules()]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names)


def test_get_rule_unknown_raises_keyerror():
    with pytest.raises(KeyError):
        get_rule("MP999")


def test_codes_no_pass_raises_yet_are_marked_in_rules_and_explain():
    import subprocess
    import sys

    from mpdoctor.registry import implemented_codes

    missing = {r.code for r in all_rules()} - implemented_codes()
    assert "MP401" not in missing and "MP001" not in missing and "MP002" not in missing
    table = subprocess.run([sys.executable, "-m", "mpdoctor", "rules"], capture_output=True, text=True).stdout
    marked = {line.split()[0] for line in table.splitlines() if "(not checked yet)" in line}
    assert marked == missing
