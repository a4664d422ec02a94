"""Text from user code or the file system made safe to print: layer and model names, paths, exception texts and the
trace child's output can hold terminal escape sequences (rewrite the title, clear the screen, move the cursor),
carriage returns and newlines (forge a finding line), or bytes that are not UTF-8 (a file name).

`escape_controls` shows every such character as a Python-style escape (`\\x1b`, `\\n`, `\\u202e`), keeping tabs
and dropping colour sequences;
`readable_name` turns the bytes that a non-UTF-8 file name carries as lone surrogates (`os.fsdecode`'s
surrogateescape) into `\\xff`, so the name can be encoded in any output format.
"""

from __future__ import annotations

import re

# C0 controls but TAB, DEL, C1 controls (CSI is \x9b), the Unicode bidirectional and line-separator controls
# ("Trojan Source"), and lone surrogates (undecodable bytes of a file name, or forged by user code).
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATE_BYTES = re.compile("[\udc80-\udcff]")
# Colour and weight (SGR) sequences, which Keras puts in its own error messages: dropped, not shown as escapes.
_SGR = re.compile("\x1b\\[[0-9;]*m")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape could not decode
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with control characters, bidi controls and lone surrogates escaped, for one line of terminal output.
    Colour sequences are dropped (Keras formats its messages with them; shown as escapes they only add noise, and
    dropping them also drops any attempt to hide text with them)."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, _SGR.sub("", text))


def readable_name(text: str) -> str:
    """A path or name with its undecodable bytes (lone surrogates) as `\\xNN`: encodable as UTF-8, readable."""
    return _SURROGATE_BYTES.sub(_escape, text) if _SURROGATE_BYTES.search(text) else text


_READABLE_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def name_bytes(shown: str) -> bytes:
    """The file name's bytes back from `readable_name` (for a URI, which can carry any byte). A name that holds a
    literal `\\x80`...`\\xff` as text is read as that byte: rare enough on file systems to accept."""
    return _READABLE_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), shown).encode("utf-8", "surrogateescape")
