"""`mpdoctor server` (issue 34): the time from a didChange to the publishDiagnostics of that version, against the
same text's static check in-process (what the server runs for it, without the protocol).

    python bench/server.py [--quick] [--json]

1. A 2,000-line module (bench/_synthetic.py `big_file`: a float16 softmax head and a -1e9 mask per block).
2. A model module of a 50-file project (`project_tree`: its entry point sets the policy behind --amp, so the file is
   checked under the project's policy context).
The real server runs in its own process over stdio, driven by pygls' client; each edit appends a comment line (a
new version), one at a time, and the median of the round trips is the figure (the debounce included). Target:
under 100 ms (median). Baseline: the median of `check_source` of the same texts in this process, with the same
project contexts. Prints figures only; never asserts on time.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, ROOT, main_for, python_env, row
from _synthetic import big_file, project_tree

sys.path.insert(0, ROOT)

WAIT = 120.0  # seconds: bounds a hang


async def round_trips(path: Path, cwd: Path, edits: int) -> tuple[list[float], int]:
    """Seconds from each didChange to the publishDiagnostics of its version, and the findings of the last one."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient
    from pygls.uris import from_fs_path

    client = LanguageClient("mpdoctor-bench", "1")
    published: dict[int, asyncio.Future[int]] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(params: types.PublishDiagnosticsParams) -> None:
        waiting = published.get(params.version or 0)
        if waiting is not None and not waiting.done():
            waiting.set_result(len(params.diagnostics))

    await client.start_io(PYTHON, "-m", "mpdoctor", "server", cwd=cwd, env=python_env())
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=from_fs_path(str(cwd)),
            initialization_options={"trace": "off"},
        )
    )
    client.initialized(types.InitializedParams())
    uri = from_fs_path(str(path))
    text = path.read_text()
    loop = asyncio.get_running_loop()
    published[1] = loop.create_future()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    found = await asyncio.wait_for(published[1], WAIT)  # the first check warms the imports and the project analysis
    times = []
    for version in range(2, edits + 2):
        text += f"# edit {version}\n"
        published[version] = loop.create_future()
        start = time.perf_counter()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        found = await asyncio.wait_for(published[version], WAIT)
        times.append(time.perf_counter() - start)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times, found


def in_process(path: Path, folder: Path, edits: int) -> list[float]:
    """The same texts checked by the server's own checking code in this process (configuration and project
    contexts cached after the first, as in the server)."""
    from mpdoctor.server.workspace import Workspace

    workspace = Workspace()
    workspace.folders = [folder]
    text = path.read_text()
    workspace.check(path, path.name, text)  # warm: imports, configuration, project analysis
    times = []
    for version in range(2, edits + 2):
        text += f"# edit {version}\n"
        start = time.perf_counter()
        workspace.check(path, path.name, text)
        times.append(time.perf_counter() - start)
    return times


def measure(name: str, path: Path, cwd: Path, edits: int, note: str) -> dict:
    times, found = asyncio.run(round_trips(path, cwd, edits))
    baseline = in_process(path, cwd, edits)
    median, base = statistics.median(times), statistics.median(baseline)
    return row(
        name,
        median * 1000,
        base * 1000,
        unit="ms",
        target="< 100",
        note=f"median of {edits} edits (max {max(times) * 1000:.0f} ms); {found} findings; {note}",
    )


def results(quick: bool = False) -> list[dict]:
    edits = 5 if quick else 21
    with tempfile.TemporaryDirectory(prefix="mpdoctor-bench-server-") as tmp:
        base = Path(tmp)
        (base / "single").mkdir()
        module = big_file(base / "single" / "model.py", 2_000)
        lines = module.read_text().count("\n")
        project = project_tree(base / "project", 50, packages=2)
        files = len(list(project.rglob("*.py")))
        net = project / "pkg00" / "models" / "net_0.py"
        return [
            measure(
                f"server didChange -> diagnostics, {lines:,}-line file",
                module,
                module.parent,
                edits,
                "vs check_source in-process",
            ),
            measure(
                f"server didChange -> diagnostics, {files}-file project",
                net,
                project,
                edits,
                "a model module under the entry point's policy; vs check_source in-process, same contexts",
            ),
        ]


if __name__ == "__main__":
    sys.exit(main_for(results))
