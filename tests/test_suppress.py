from mpdoctor.suppress import ALL, find_suppressions, is_suppressed


def test_noqa_codes_are_parsed_and_foreign_codes_ignored():
    [s] = find_suppressions("x = 1  # noqa: MP401, E501\n")
    assert s.codes == ("MP401",)
    assert s.line == 1 and s.column == 8
    assert not s.only_ours  # E501 would be lost by removing the comment


def test_bare_noqa_is_not_ours():
    assert find_suppressions("x = 1  # noqa\ny = 2  # noqa: E501\n") == []


def test_mpdoctor_ignore_forms():
    text = "# mpdoctor: ignore-file[MP601]\nx = 1  # mpdoctor: ignore[MP201,MP207]\ny = 2  # mpdoctor: ignore\n"
    file_level, line_level, bare = find_suppressions(text)
    assert file_level.file_level and file_level.codes == ("MP601",)
    assert line_level.codes == ("MP201", "MP207") and line_level.only_ours
    assert bare.codes == (ALL,)


def test_suppression_marks_use_only_on_matching_line_and_code():
    sups = find_suppressions("a\nb  # noqa: MP401\n")
    assert not is_suppressed(sups, "MP401", (1,))
    assert not is_suppressed(sups, "MP402", (2,))
    assert is_suppressed(sups, "MP401", (2,))
    assert sups[0].used == {"MP401"}


def test_strings_that_look_like_comments_are_not_suppressions():
    assert find_suppressions('s = "# noqa: MP401"\n') == []


def test_broken_source_yields_no_suppressions_instead_of_raising():
    assert find_suppressions("s = '''unterminated\n# noqa: MP401\n") == []
