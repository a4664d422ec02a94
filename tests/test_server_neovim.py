"""`mpdoctor server` attached to a buffer by a real editor: headless Neovim runs docs/editors.md's configuration as
printed and reads back the diagnostic (issue 34). Skipped where nvim is not installed. Neovim 0.7 (Debian 12's) has
no `vim.lsp.start`: the test defines it from 0.7's own calls before the configuration, as 0.8 does it for a buffer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = (
    "import keras\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
SHIM = """
if vim.lsp.start == nil then
  vim.lsp.start = function(config)
    local id = vim.lsp.start_client(config)
    vim.lsp.buf_attach_client(0, id)
    return id
  end
end
"""
READ_BACK = """
vim.api.nvim_create_autocmd("VimEnter", { callback = function()
  vim.wait(90000, function() return #vim.diagnostic.get(0) > 0 end, 50)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
    table.insert(out, string.format("%s %s %d %d", d.source, tostring(code), d.lnum, d.col))
  end
  vim.fn.writefile(out, "diagnostics.txt")
  vim.cmd("qa!")
end })
"""


def documented_config() -> str:
    text = (ROOT / "docs" / "editors.md").read_text()
    block = text.split("<!-- neovim-config -->\n```lua\n", 1)[1]
    return block.split("```", 1)[0]


@pytest.mark.skipif(shutil.which("nvim") is None, reason="needs Neovim (apt-get install neovim)")
def test_neovim_attaches_the_server_as_documented_and_shows_the_finding(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "mpdoctor"  # `mpdoctor` on PATH, as the configuration names it: this checkout's
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mpdoctor "$@"\n')
    wrapper.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(MODEL)
    (tmp_path / "init.lua").write_text(SHIM + documented_config() + READ_BACK)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    subprocess.run(
        ["nvim", "--headless", "-n", "-i", "NONE", "-u", str(tmp_path / "init.lua"), "model.py"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=180,
        check=True,
    )
    lines = (project / "diagnostics.txt").read_text().splitlines()
    assert lines == ["mpdoctor MP401 2 45"]  # 0-based line 3, column 46: the Dense call, as `check` reports it
    assert not _servers_left(str(bin_dir)), "the server outlived Neovim"


def _servers_left(marker: str) -> list[int]:
    """The processes still running from our wrapper, after a grace period for the server to see its stdin close."""
    deadline = time.monotonic() + 30
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    command = Path(f"/proc/{entry}/cmdline").read_bytes()
                    environ = Path(f"/proc/{entry}/environ").read_bytes()
                except OSError:
                    continue
                if b"mpdoctor" in command and marker.encode() in environ:
                    found.append(int(entry))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
