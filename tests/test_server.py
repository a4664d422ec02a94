"""`mpdoctor server` (issue 34), driven end to end over stdio by pytest-lsp's client as an editor drives it:
diagnostics on open and on change, code actions whose edits give the fixed text, hover, the project's policy, the
trace on save, and no process left after shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.protocol import default_converter
from pygls.uris import from_fs_path
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parent.parent
MODEL = (
    "import keras\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
FIXED = MODEL.replace("activation='softmax')", "activation='softmax', dtype=\"float32\")")
WAIT = 120.0  # seconds: bounds a hang, never a timing assertion


@contextlib.asynccontextmanager
async def session(
    cwd: Path, settings: dict | None = None, cache: bool = False, unset: tuple[str, ...] = ()
) -> AsyncIterator[LanguageClient]:
    """The real server in a process of its own, initialized; shut down (and checked to leave no process) after.
    `cache`: with the result cache (the suite turns it off: tests/conftest.py); `unset`: environment variables the
    server does not inherit."""
    client = recording_client()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    for name in unset:
        env.pop(name, None)
    if cache:
        env.pop("MPDOCTOR_NO_CACHE", None)
    await client.start_io(sys.executable, "-m", "mpdoctor", "server", cwd=cwd, env=env)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=from_fs_path(str(cwd)),
            initialization_options=settings,
        )
    )
    try:
        yield client
    finally:
        server = client._server
        started = descendants(server.pid) if server is not None else set()
        await asyncio.wait_for(client.shutdown_session(), WAIT)
        await client.stop()
        assert server is not None and server.returncode == 0
        assert not {pid for pid in started if alive(pid)}, "processes the server started outlived it"


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def open_file(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = from_fs_path(str(path))
    text = path.read_text() if text is None else text
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )
    return uri


def change(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def recording_client() -> LanguageClient:
    """pytest-lsp's test client that also keeps every publishDiagnostics in order (`client.published`): waiting for
    the next notification would miss one that arrives in the same read as the one before."""

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)

    client = LanguageClient(converter_factory=default_converter)
    client.published, client.read = [], 0
    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


async def diagnostics(client: LanguageClient, uri: str, version: int | None = None) -> list[types.Diagnostic]:
    """The diagnostics the server publishes next for `uri` (of `version`, when given)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while asyncio.get_running_loop().time() < deadline:
        while client.read < len(client.published):
            params = client.published[client.read]
            client.read += 1
            if params.uri == uri and (version is None or params.version == version):
                return list(params.diagnostics)
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no diagnostics published for {uri} (version {version}) within {WAIT:g} s")


def apply(text: str, edits: list[types.TextEdit]) -> str:
    """The text edits applied as an editor applies them (positions of the original text, last first)."""
    lines = text.splitlines(keepends=True)

    def offset(position: types.Position) -> int:
        if position.line >= len(lines):
            return len(text)
        return sum(len(line) for line in lines[: position.line]) + position.character

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


async def test_a_float16_softmax_head_is_found_as_typed_and_cleared_by_its_fix(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        found = await diagnostics(client, uri, 1)
        assert [d.code for d in found] == ["MP401"]
        mp401 = found[0]
        # `-:3:46: MP401` as `check -` reports it: 0-based line 2, the Dense call from column 45.
        assert (mp401.range.start.line, mp401.range.start.character) == (2, 45)
        assert MODEL.splitlines()[2][mp401.range.start.character :].startswith("keras.layers.Dense(")
        assert mp401.severity == types.DiagnosticSeverity.Error and mp401.source == "mpdoctor"
        assert mp401.code_description is not None and "RULES.md" in mp401.code_description.href

        change(client, uri, FIXED, 2)
        assert await diagnostics(client, uri, 2) == []


async def test_the_quick_fix_gives_the_fixed_text_and_noqa_silences_the_line(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        (mp401,) = await diagnostics(client, uri, 1)
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=mp401.range,
                context=types.CodeActionContext(diagnostics=[mp401]),
            )
        )
        assert actions is not None
        fix = next(a for a in actions if a.is_preferred)
        assert fix.kind == types.CodeActionKind.QuickFix and fix.title.startswith("MP401: ")
        assert apply(MODEL, fix.edit.changes[uri]) == FIXED
        noqa = next(a for a in actions if a.title == "Disable MP401 for this line")
        silenced = apply(MODEL, noqa.edit.changes[uri])
        assert silenced.splitlines()[2].endswith("  # noqa: MP401")
        change(client, uri, silenced, 2)
        assert await diagnostics(client, uri, 2) == []


async def test_fix_all_applies_every_safe_fix_through_the_fix_engine(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        await diagnostics(client, uri, 1)
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
                context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.SourceFixAll]),
            )
        )
        assert actions is not None and [a.kind for a in actions] == ["source.fixAll.mpdoctor"]
        assert apply(MODEL, actions[0].edit.changes[uri]) == FIXED


async def test_hover_on_a_finding_shows_the_rule_explanation(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        (mp401,) = await diagnostics(client, uri, 1)
        hover = await client.text_document_hover_async(
            types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=mp401.range.start)
        )
        assert hover is not None and "MP401 float16-output-activation" in hover.contents.value
        assert "Why it breaks" in hover.contents.value
        elsewhere = await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=2)
            )
        )
        assert elsewhere is None


async def test_the_workspace_configuration_and_the_client_settings_apply(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\nignore = ["MP401"]\n')
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\n")
    async with session(tmp_path, {"mpdoctor": {"ignore": ["MP401"]}}) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []


NET = (
    "import keras\n"
    "\n"
    "\n"
    "def build():\n"
    "    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='softmax')])\n"
)
TRAIN = "import keras\nfrom models.net import build\n\n{policy}model = build()\n"
POLICY = "keras.mixed_precision.set_global_policy('mixed_float16')\n"


async def test_a_policy_set_in_the_entry_point_refreshes_the_module_it_calls(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    net = tmp_path / "models" / "net.py"
    net.write_text(NET)
    train = tmp_path / "train.py"
    train.write_text(TRAIN.format(policy=""))
    async with session(tmp_path, {"trace": "off"}) as client:
        net_uri = open_file(client, net)
        assert await diagnostics(client, net_uri, 1) == []
        train_uri = open_file(client, train)
        await diagnostics(client, train_uri, 1)
        with_policy = TRAIN.format(policy=POLICY)
        change(client, train_uri, with_policy, 2)
        train.write_text(with_policy)
        client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=train_uri))
        )
        found = await diagnostics(client, net_uri)
        assert [d.code for d in found] == ["MP401"] and found[0].range.start.line == 4
        (related,) = found[0].related_information
        assert related.location.uri == train_uri and related.location.range.start.line == 3


TRACE_ONLY = (  # a float16 output no static rule sees: the head's activation is chosen at run time
    "import keras\n"
    "keras.mixed_precision.set_global_policy('mixed_float16')\n"
    "head = getattr(keras.activations, 'soft' + 'max')\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation=head)])\n"
)


async def test_saving_runs_the_trace_which_adds_a_trace_only_finding(tmp_path, tensorflow):
    path = tmp_path / "model.py"
    path.write_text(TRACE_ONLY)
    async with session(tmp_path, cache=True) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []  # the static pass cannot tell the activation
        client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        traced = await diagnostics(client, uri, 1)
        assert [d.code for d in traced] == ["MP401"], [d.message for d in traced]
        assert "computes softmax in float16" in traced[0].message and traced[0].range.start.line == 3
        # A static finding the trace confirms takes the trace's words; the result is cached as `check` caches it (a
        # trace-only finding's fix is not re-derivable from the source, so that one is not: mpdoctor.cache).
        confirmed = tmp_path / "confirmed.py"
        confirmed.write_text(MODEL)
        other = open_file(client, confirmed)
        (static,) = await diagnostics(client, other, 1)
        assert static.message.startswith("model output Dense (last layer of Sequential")
        client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=other))
        )
        (traced,) = await diagnostics(client, other, 1)
        assert traced.message.startswith("output `dense") and traced.range.start.line == 2
        assert any((tmp_path / ".mpdoctor_cache").iterdir())


@pytest.mark.backend
async def test_the_trace_on_save_runs_on_the_backend_the_workspace_configures(tmp_path):
    """A JAX project says so in `[tool.mpdoctor] keras-backend` alone (no KERAS_BACKEND, no TensorFlow in the stage
    that runs this: ci/backends.py): saving traces on JAX, as `check` would."""
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras") is None:
        pytest.skip("needs keras and jax")
    (tmp_path / "pyproject.toml").write_text('[tool.mpdoctor]\nkeras-backend = "jax"\n')
    path = tmp_path / "model.py"
    path.write_text(TRACE_ONLY)
    async with session(tmp_path, unset=("KERAS_BACKEND",)) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []
        client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        traced = await diagnostics(client, uri, 1)
        assert [d.code for d in traced] == ["MP401"], [d.message for d in traced]


async def test_an_unreadable_configuration_is_said_once_and_the_defaults_are_used(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\nselect = 3\n")
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        assert [d.code for d in await diagnostics(client, uri, 1)] == ["MP401"]
        (message,) = [m for m in client.messages if "pyproject.toml" in m.message]
        assert message.type == types.MessageType.Warning and "the defaults are used" in message.message


async def test_without_the_server_extra_it_is_a_one_line_error(tmp_path):
    blocked = "import sys; sys.modules['pygls'] = None; from mpdoctor.cli import main; sys.exit(main(['server']))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, env=env, timeout=WAIT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "mpdoctor: error: `mpdoctor server` needs pygls (pip install 'mpdoctor[server]')\n"


async def test_a_change_during_the_trace_ends_it_and_the_static_findings_stay(tmp_path, tensorflow):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\ntrace-timeout = 900\n")
    slow = TRACE_ONLY + "import time\ntime.sleep(900)  # the trace would run until its timeout\n"
    path = tmp_path / "model.py"
    path.write_text(slow)
    async with session(tmp_path) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []
        client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        server = client._server.pid
        assert await until(lambda: trace_children(server)), "no trace started on save"
        change(client, uri, slow + "# edited\n", 2)
        assert await diagnostics(client, uri, 2) == []
        assert await until(lambda: not trace_children(server)), "the trace of the old text still runs"


async def until(condition, limit: float = WAIT) -> bool:
    """Poll `condition` until it holds (True) or `limit` seconds pass (False): bounds a wait, asserts no timing."""
    deadline = asyncio.get_running_loop().time() + limit
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def trace_children(server: int) -> list[int]:
    """The server's trace children: forked by its fork server (mpdoctor.trace.forkserver), or started on their own
    (`-m mpdoctor.trace.child`)."""
    found = []
    for pid in descendants(server):
        with contextlib.suppress(OSError):
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            forked = b"mpdoctor.trace.forkserver" in Path(f"/proc/{parent}/cmdline").read_bytes()
            if (forked or b"mpdoctor.trace.child" in command) and alive(pid):
                found.append(pid)
    return found


async def test_an_excluded_file_and_a_notebook_cell_are_left_alone(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpdoctor]\n")
    (tmp_path / ".venv").mkdir()
    vendored = tmp_path / ".venv" / "model.py"  # excluded by default, as `check .` skips it
    vendored.write_text(MODEL)
    checked = tmp_path / "model.py"
    checked.write_text(MODEL)
    async with session(tmp_path) as client:
        assert await diagnostics(client, open_file(client, vendored), 1) == []
        cell = "vscode-notebook-cell:" + from_fs_path(str(tmp_path / "demo.ipynb"))[len("file:") :] + "#W0"
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=cell, language_id="python", version=1, text=MODEL)
            )
        )
        uri = open_file(client, checked)  # published after the cell's would have been: none came for it
        assert [d.code for d in await diagnostics(client, uri, 1)] == ["MP401"]
        assert cell not in client.diagnostics


async def test_a_notebook_is_checked_as_one_program_and_each_finding_lands_on_its_cell(tmp_path):
    notebook = from_fs_path(str(tmp_path / "demo.ipynb"))
    cell_uris = [f"vscode-notebook-cell:{notebook[len('file:') :]}#W{i}" for i in range(3)]
    texts = ["# Mixed precision", MODEL.split("\n", 2)[0] + "\n" + MODEL.split("\n", 2)[1] + "\n", MODEL.split("\n")[2]]
    kinds = [types.NotebookCellKind.Markup, types.NotebookCellKind.Code, types.NotebookCellKind.Code]
    async with session(tmp_path) as client:
        client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(
                notebook_document=types.NotebookDocument(
                    uri=notebook,
                    notebook_type="jupyter-notebook",
                    version=1,
                    cells=[types.NotebookCell(kind=k, document=u) for k, u in zip(kinds, cell_uris, strict=True)],
                ),
                cell_text_documents=[
                    types.TextDocumentItem(
                        uri=u, language_id="markdown" if k == kinds[0] else "python", version=1, text=t
                    )
                    for u, k, t in zip(cell_uris, kinds, texts, strict=True)
                ],
            )
        )
        # The policy set in the second cell makes the third cell's softmax head float16: found on that cell.
        (found,) = await diagnostics(client, cell_uris[2])
        assert found.code == "MP401" and (found.range.start.line, found.range.start.character) == (0, 45)
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=cell_uris[2]),
                range=found.range,
                context=types.CodeActionContext(diagnostics=[found]),
            )
        )
        fix = next(a for a in actions or [] if a.is_preferred)
        assert apply(texts[2], fix.edit.changes[cell_uris[2]]) == FIXED.split("\n")[2]
        assert list(client.diagnostics[cell_uris[1]]) == []
        # The fix typed into the cell: the notebook changes, the finding goes.
        client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=notebook),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        text_content=[
                            types.NotebookDocumentCellContentChanges(
                                document=types.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                                changes=[types.TextDocumentContentChangeWholeDocument(text=FIXED.split("\n")[2])],
                            )
                        ]
                    )
                ),
            )
        )
        assert await diagnostics(client, cell_uris[2]) == []


async def test_changed_settings_recheck_the_open_files_and_empty_ones_keep_the_options(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    async with session(tmp_path, {"ignore": ["MP401"]}) as client:
        uri = open_file(client, path)
        assert await diagnostics(client, uri, 1) == []
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        assert await diagnostics(client, uri, 1) == []  # rechecked, the initialization options still apply
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"mpdoctor": {}}))
        assert [d.code for d in await diagnostics(client, uri, 1)] == ["MP401"]


async def test_disabling_a_code_joins_the_noqa_comment_already_on_the_line():
    from pygls.workspace.position_codec import PositionCodec

    from mpdoctor.config import Config
    from mpdoctor.engine import check_source
    from mpdoctor.server import convert

    text = MODEL.replace("'softmax')])\n", "'softmax')])  # noqa: MP403\n")
    (finding,) = [d for d in check_source(text, "m.py", Config())[0] if d.code == "MP401"]
    lines, codec = text.splitlines(keepends=True), PositionCodec()
    action = convert.noqa_action("file:///m.py", codec, lines, text, finding, convert.to_lsp(codec, lines, finding))
    assert action is not None
    fixed = apply(text, action.edit.changes["file:///m.py"])
    assert fixed.splitlines()[2].endswith("  # noqa: MP401, MP403")
    assert [d.code for d in check_source(fixed, "m.py", Config())[0]] == ["MP002"]  # MP403 was never there
