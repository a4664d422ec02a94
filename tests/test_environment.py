"""The installed versions the static pass reads (mpdoctor.project.environment): from a wheel's `.dist-info`
directory name where that is what importlib.metadata would read, from importlib.metadata otherwise."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest

from mpdoctor.project import environment


@pytest.fixture
def path_entries(tmp_path, monkeypatch):
    """Two fresh sys.path entries in front of the others (their listings not cached yet)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    environment._listing.cache_clear()
    yield first, second
    environment._listing.cache_clear()


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it():
    names = {d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]}
    assert {"pytest", "jinja2", "libcst"} <= {n.lower() for n in names}
    read = 0
    for name in sorted(names):
        quick = environment._wheel_version(name)
        if quick is not None:
            assert quick == metadata.version(name), name
            read += 1
    assert read >= len(names) // 2  # most installs are wheels: the quick path is the one taken


def dist_info(where, name: str, version: str) -> None:
    info = where / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_first_entry_holding_the_distribution_wins_and_names_compare_normalised(path_entries):
    first, second = path_entries
    dist_info(first, "Foo_Bar", "1.2.0")
    dist_info(second, "foo_bar", "3.4.0")
    for spelling in ("foo-bar", "Foo.Bar", "foo_bar"):
        assert environment._wheel_version(spelling) == "1.2.0" == metadata.version(spelling)
    assert environment._version("foo-bar") == (1, 2)


def test_anything_but_one_wheel_is_left_to_importlib_metadata(path_entries):
    first, _second = path_entries
    dist_info(first, "twice", "1.0")
    dist_info(first, "twice", "2.0")
    egg = first / "legacy.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 5.6\n")
    assert environment._wheel_version("twice") is None
    assert environment._wheel_version("legacy") is None
    assert environment._version("legacy") == (5, 6)  # read by importlib.metadata
    assert environment._version("not-installed-anywhere") is None
