"""The text of a checked file as the static pass reads it: its lines, the source of a node, and ast's UTF-8 byte
offsets turned into the character columns diagnostics and edits show."""

from __future__ import annotations

import ast
import re

_LINE_BREAK = re.compile(r"\r\n?|\n")


def source_lines(text: str) -> list[str]:
    """Lines as ast and tokenize number them (str.splitlines also breaks on \\f, \\x1c, \\u2028...)."""
    return _LINE_BREAK.split(text) if "\r" in text else text.split("\n")  # the same lists, str.split is quicker


class SourceLines:
    """A checked file's text split into the lines ast numbers, with the source of its nodes (not the report's
    mpdoctor.diagnostics.SourceText, which keeps what was analysed for the renderers)."""

    def __init__(self, display_path: str, text: str) -> None:
        self.display_path = display_path  # the file as reports name it
        self.text = text
        self.lines = source_lines(text)
        self._ascii = text.isascii()  # then every column is its byte offset + 1

    def segment(self, node: ast.AST) -> str:
        """Source text of `node` (ast.get_source_segment re-splits the whole file on every call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None or node.end_col_offset is None:
            return ""
        col, end_col = node.col_offset, node.end_col_offset
        if start == end:
            return self.lines[start - 1].encode()[col:end_col].decode(errors="replace")
        first = self.lines[start - 1].encode()[col:].decode(errors="replace")
        last = self.lines[end - 1].encode()[:end_col].decode(errors="replace")
        return "\n".join([first, *self.lines[start : end - 1], last])

    def column(self, line: int, byte_offset: int) -> int:
        """1-based character column from ast's UTF-8 byte offset (they differ on non-ASCII lines)."""
        if self._ascii:
            return byte_offset + 1
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_offset + 1
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")) + 1

    def span(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(line, column, end line, end column) of `node`, columns 1-based in characters."""
        line = node.lineno
        end_line = getattr(node, "end_lineno", None) or line
        end_offset = getattr(node, "end_col_offset", None)
        col_offset = node.col_offset
        end_column = self.column(end_line, end_offset if end_offset is not None else col_offset)
        return line, self.column(line, col_offset), end_line, end_column

    def text_before(self, line: int, col: int) -> str:
        """The few source lines before (line, byte offset), the last one cut at that offset."""
        start = max(0, line - 5)
        chunk = self.lines[start:line]
        if chunk:
            chunk[-1] = chunk[-1][: self.column(line, col) - 1]
        return "\n".join(chunk)
