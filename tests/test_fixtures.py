import pytest
from fixture_runner import FIXTURES, fixture_files, run_fixture

FILES = fixture_files()


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(FIXTURES).as_posix() for p in FILES])
def test_fixture(path):
    expected, actual = run_fixture(path)
    assert sorted(actual) == sorted(expected), (
        f"missing: {sorted(expected - actual)}, unexpected: {sorted(actual - expected)}"
    )


def test_every_static_rule_has_positive_and_negative_fixtures_in_both_keras_versions():
    from fixture_runner import expectations

    from mpdoctor.registry import all_rules

    for rule in all_rules():
        if "S" not in rule.passes:
            continue
        files = [p for p in FILES if p.relative_to(FIXTURES).parts[0] == rule.code]
        positives = [p for p in files if any(code == rule.code for _, code in expectations(p)[1])]
        negatives = [p for p in files if not any(code == rule.code for _, code in expectations(p)[1])]
        assert positives, f"{rule.code} has no positive fixture"
        assert negatives, f"{rule.code} has no negative fixture"
        for version in ("keras2", "keras3"):
            assert any(version in p.name for p in files), f"{rule.code} has no {version} fixture"
