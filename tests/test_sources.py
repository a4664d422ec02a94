"""Reading a Python file's text: what tokenize.detect_encoding and the coding cookie say, also on the fast path
that skips detect_encoding for plain UTF-8 files."""

import io
import tokenize

import pytest

from mpdoctor.sources import read_source

CASES = {
    "plain": b"x = 1\n",
    "utf-8 text": "s = 'caf\xe9 \u2713'\n".encode(),
    "bom": b"\xef\xbb\xbfx = 1\n",
    "latin-1 cookie": "# -*- coding: latin-1 -*-\ns = 'caf\xe9'\n".encode("latin-1"),
    "cookie on line 2": "#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\ns = '\xe9'\n".encode("latin-1"),
    "cookie without newline": b"# coding: latin-1",
    # Bytes that are valid UTF-8 too: only the cookie makes them latin-1 ("\xc3\xa9" is two characters then).
    "utf-8 bytes, latin-1 cookie on line 2": b"#!/usr/bin/env python\n# coding: latin-1\ns = '\xc3\xa9'\n",
    "utf-8 bytes, latin-1 cookie on line 1": b"# coding: latin-1\ns = '\xc3\xa9'\n",
    "crlf cookie": "# coding: latin-1\r\ns = '\xe9'\r\n".encode("latin-1"),
    "coding as a word": b"# decoding happens here\nx = 1\n",
    "no newline": b"x = 1",
    "empty": b"",
    "not utf-8, no cookie": b"s = '\xe9'\n",
    "not utf-8 on line 1": b"\xe9 = 1\n",
    "unknown cookie": b"# coding: no-such-codec\nx = 1\n",
    "bom and another cookie": b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
}


def _by_tokenize(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


@pytest.mark.parametrize("name", sorted(CASES))
def test_read_source_decodes_as_detect_encoding_does(tmp_path, name):
    data = CASES[name]
    path = tmp_path / "m.py"
    path.write_bytes(data)
    try:
        expected = _by_tokenize(data)
    except (SyntaxError, UnicodeDecodeError) as exc:
        with pytest.raises(type(exc)) as raised:
            read_source(path)
        assert str(raised.value) == str(exc)
    else:
        assert read_source(path) == expected
