"""The language server: pygls handlers over mpdoctor.server.workspace (the checking) and mpdoctor.server.convert
(the LSP data). The static pass runs on open and on every change (debounced, in a worker thread, published only for
the version it checked); the trace runs on save in a thread of its own, never in the way of the static findings, and
is ended when its file changes again. The trace's findings replace the static ones while the buffer holds the text
it traced."""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from mpdoctor._version import __version__
from mpdoctor.diagnostics import Diagnostic
from mpdoctor.server import convert, notebooks
from mpdoctor.server.notebooks import NotebookCheck, notebook_check
from mpdoctor.server.workspace import Checked, ClientSettings, Workspace, on_disk

NOTEBOOK_CELL = "vscode-notebook-cell:"
DEBOUNCE = 0.01  # seconds of quiet after a change before it is checked: a burst of keystrokes is checked once


@dataclass(frozen=True)
class Published:
    """The findings last published for a document, and the text they are of."""

    text: str
    findings: list[Diagnostic]
    traced: bool = False


class MpdoctorServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("mpdoctor", __version__, notebook_document_sync=notebooks.SYNC)
        self.checker = Workspace()
        self.published: dict[str, Published] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._static = ThreadPoolExecutor(1, thread_name_prefix="mpdoctor-static")
        self._tracer = ThreadPoolExecutor(1, thread_name_prefix="mpdoctor-trace")
        self._tracing: str | None = None  # the uri whose trace is running
        self._warned: set[str] = set()  # configuration errors already shown
        self._notebook_cells: dict[str, set[str]] = {}  # notebook uri -> the code cells last published

    # ---------------------------------------------------------------------------------------------- the checks

    def schedule(self, uri: str, delay: float = DEBOUNCE) -> None:
        """Check the document after `delay` seconds of quiet (a newer change replaces this one)."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._pending[uri] = asyncio.get_running_loop().create_task(self._check_later(uri, delay))

    async def _check_later(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        document = self._document(uri)
        if document is None:
            return
        text, version = document.source, document.version
        checked = await asyncio.get_running_loop().run_in_executor(self._static, self._static_job, document, text)
        current = self._document(uri)
        if checked is None or current is None or current.version != version or current.source != text:
            return  # changed meanwhile: the newer change is checked
        self._said(checked)
        traced = self.published.get(uri)
        if traced is not None and traced.traced and traced.text == text:
            return  # the trace's findings of this very text stand
        self._publish(current, Published(text, checked.diagnostics))

    def schedule_notebook(self, uri: str, delay: float = DEBOUNCE) -> None:
        """Check the notebook's code cells together after `delay` seconds of quiet."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._pending[uri] = asyncio.get_running_loop().create_task(self._check_notebook_later(uri, delay))

    async def _check_notebook_later(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        made = self._notebook(uri)
        if made is None:
            return
        texts = self._cell_texts(made)
        name = uri.rsplit("/", 1)[-1]
        checked = await asyncio.get_running_loop().run_in_executor(
            self._static, self.checker.check_notebook, convert.path_of(uri), name, made.notebook
        )
        now = self._notebook(uri)
        if now is None or now.cells != made.cells or self._cell_texts(now) != texts:
            return  # changed meanwhile: the newer change is checked
        self._said(checked)
        by_cell = made.by_cell(checked.diagnostics)
        for gone in self._notebook_cells.get(uri, set()) - by_cell.keys():  # a cell deleted, or now markdown
            self.published.pop(gone, None)
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=gone, diagnostics=[]))
        self._notebook_cells[uri] = set(by_cell)
        for cell, findings in by_cell.items():
            document = self.workspace.text_documents.get(cell)
            if document is not None:
                self._publish(document, Published(document.source, findings))

    def _notebook(self, uri: str) -> NotebookCheck | None:
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return None
        return notebook_check(notebook, lambda cell: self._cell_texts_of([cell]).get(cell))

    def _cell_texts(self, made: NotebookCheck) -> dict[str, str]:
        return self._cell_texts_of(made.cells)

    def _cell_texts_of(self, cells: list[str]) -> dict[str, str]:
        documents = self.workspace.text_documents
        return {cell: documents[cell].source for cell in cells if cell in documents}

    def close_notebook(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        for cell in self._notebook_cells.pop(uri, set()):
            self.published.pop(cell, None)
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell, diagnostics=[]))

    def _static_job(self, document: TextDocument, text: str) -> Checked | None:
        """The static check of `text`, unless the buffer changed while the job waited for the one before (typing
        during a long check queues one job per change: only the newest is worth its time)."""
        current = self._document(document.uri)
        if current is None or current.source != text:
            return None
        return self._check(document, text)

    def _check(self, document: TextDocument, text: str) -> Checked:
        path = convert.path_of(document.uri)
        return self.checker.check(path, document.uri.rsplit("/", 1)[-1], text)

    def _said(self, checked: Checked) -> Checked:
        """`checked`, once what the user must know of it is said: an internal error, a configuration not read. In
        the event loop's thread only: the protocol's writer is not shared with the worker threads."""
        if checked.error is not None and checked.error.kind == "internal":  # `check` prints it; a log line here
            self.window_log_message(
                types.LogMessageParams(type=types.MessageType.Error, message=f"mpdoctor: {checked.error.render()}")
            )
        if checked.config_error is not None and checked.config_error not in self._warned:
            self._warned.add(checked.config_error)
            self.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=f"mpdoctor: {checked.config_error}")
            )
        return checked

    async def trace(self, uri: str) -> None:
        """The trace of the saved file, then its findings published if the buffer still holds that text."""
        from mpdoctor.trace.runner import backend_missing

        document = self._document(uri)
        if self.checker.settings.trace != "onSave" or document is None:
            return
        text = document.source
        path = convert.path_of(uri)
        if path is None or not on_disk(path, text):
            return
        # On the backend the file's configuration names, as `check` traces it.
        if backend_missing(self.checker.config_for(path)[0].keras_backend) is not None:
            return
        loop = asyncio.get_running_loop()
        checked = await loop.run_in_executor(self._tracer, self._trace_job, uri, path, text)
        current = self._document(uri)
        if checked is None or current is None or current.source != text:
            return
        self._said(checked)
        self._publish(current, Published(text, checked.diagnostics, traced=True))

    def _trace_job(self, uri: str, path: Path, text: str) -> Checked | None:
        current = self._document(uri)
        if current is None or current.source != text or not on_disk(path, text):
            return None  # changed while it waited for the previous trace
        self._tracing = uri
        try:
            return self.checker.trace(path)
        finally:
            self._tracing = None

    def cancel_trace(self, uri: str) -> None:
        """End the trace of `uri` if it is running: the text it runs is no longer the buffer's."""
        if self._tracing == uri:
            from mpdoctor.trace.processes import end_all

            end_all()  # the server's only trace trees are its one running trace's

    def _publish(self, document: TextDocument, published: Published) -> None:
        self.published[document.uri] = published
        codec, lines = self.workspace.position_codec, document.lines
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=document.uri,
                version=document.version,
                diagnostics=[convert.to_lsp(codec, lines, d) for d in published.findings],
            )
        )

    def _document(self, uri: str) -> TextDocument | None:
        """The open Python document at `uri` (a `.py` file, or an untitled buffer the client calls Python). Not a
        notebook's cell: checked alone it would lack what earlier cells set (the policy), so it is left alone."""
        document = self.workspace.text_documents.get(uri)
        if document is None or uri.startswith(NOTEBOOK_CELL):
            return None
        return document if uri.endswith(".py") or document.language_id == "python" else None

    def requested(self, uri: str) -> TextDocument | None:
        """The document a request (code action, hover) is about: a Python file, or a notebook's cell."""
        if self.workspace.get_notebook_document(cell_uri=uri) is not None:
            return self.workspace.text_documents.get(uri)
        return self._document(uri)

    def findings_now(self, document: TextDocument) -> list[Diagnostic]:
        """The findings of the buffer as it is now: the trace's if it traced this text, else a static check (a
        notebook cell: what its notebook's last check published, if that is still its text)."""
        published = self.published.get(document.uri)
        if published is not None and published.text == document.source:
            return published.findings
        if self.workspace.get_notebook_document(cell_uri=document.uri) is not None:
            return []
        return self._said(self._check(document, document.source)).diagnostics

    def close(self) -> None:
        """End what the server started: pending checks, the running trace, the fork servers, the worker threads."""
        from mpdoctor.trace import forkserver
        from mpdoctor.trace.processes import end_all

        for pending in self._pending.values():
            pending.cancel()
        end_all()
        forkserver.close_all()
        self._static.shutdown(wait=False, cancel_futures=True)
        self._tracer.shutdown(wait=False, cancel_futures=True)


server = MpdoctorServer()


@server.feature(types.INITIALIZE)
def initialize(ls: MpdoctorServer, params: types.InitializeParams) -> None:
    ls.checker.configure(ClientSettings.parse(params.initialization_options))
    uris = [f.uri for f in params.workspace_folders or ()] or ([params.root_uri] if params.root_uri else [])
    ls.checker.folders = [p for p in map(convert.path_of, uris) if p is not None]


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: MpdoctorServer, params: types.DidChangeConfigurationParams) -> None:
    # Many clients send no settings here (`null`, `{}`): that keeps the initialization options, it resets nothing.
    if isinstance(params.settings, dict) and params.settings:
        ls.checker.configure(ClientSettings.parse(params.settings))
    _recheck_all(ls)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: MpdoctorServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, delay=0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: MpdoctorServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.cancel_trace(params.text_document.uri)
    ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
async def did_save(ls: MpdoctorServer, params: types.DidSaveTextDocumentParams) -> None:
    # What the file's project analysis read from disk may have changed: every open file is checked again (a policy
    # set in train.py changes what models/net.py's findings are).
    ls.checker.saved()
    _recheck_all(ls, but=params.text_document.uri)
    await ls.trace(params.text_document.uri)


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: MpdoctorServer, params: types.DidChangeWatchedFilesParams) -> None:
    ls.checker.saved()
    _recheck_all(ls)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: MpdoctorServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.cancel_trace(uri)
    pending = ls._pending.pop(uri, None)
    if pending is not None:
        pending.cancel()
    ls.published.pop(uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_did_open(ls: MpdoctorServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.schedule_notebook(params.notebook_document.uri, delay=0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_did_change(ls: MpdoctorServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.schedule_notebook(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_did_close(ls: MpdoctorServer, params: types.DidCloseNotebookDocumentParams) -> None:
    ls.close_notebook(params.notebook_document.uri)


def _recheck_all(ls: MpdoctorServer, but: str | None = None) -> None:
    for uri in list(ls.workspace.text_documents):
        if uri != but and ls._document(uri) is not None:
            ls.published.pop(uri, None)
            ls.schedule(uri, delay=0)
    for uri in list(ls.workspace.notebook_documents):
        ls.schedule_notebook(uri, delay=0)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, convert.FIX_ALL],
        resolve_provider=False,
    ),
)
def code_action(ls: MpdoctorServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    document = ls.requested(params.text_document.uri)
    if document is None:
        return None
    only = params.context.only
    codec, lines, uri = ls.workspace.position_codec, document.lines, document.uri
    findings = ls.findings_now(document)
    actions: list[types.CodeAction] = []
    if only is None or any(types.CodeActionKind.QuickFix.value.startswith(kind) for kind in only):
        for d in findings:
            lsp = convert.to_lsp(codec, lines, d)
            if not _overlap(lsp.range, params.range):
                continue
            for action in (
                convert.quick_fix(uri, codec, lines, d, lsp),
                convert.noqa_action(uri, codec, lines, document.source, d, lsp),
            ):
                if action is not None:
                    actions.append(action)
    if only is not None and any(convert.FIX_ALL.startswith(kind) for kind in only):
        fix_all = _fix_all(ls, document, findings)
        if fix_all is not None:
            actions.append(fix_all)
    return actions


def _fix_all(ls: MpdoctorServer, document: TextDocument, findings: list[Diagnostic]) -> types.CodeAction | None:
    """Every safe fix, applied by the fix engine to a fixed point (as `check --fix` without the trace)."""
    from mpdoctor.engine import TraceOptions, display_path
    from mpdoctor.fix.files import fix_file
    from mpdoctor.fix.rounds import wanted

    path = convert.path_of(document.uri)
    if path is None or not any(wanted(d, unsafe=False) for d in findings):
        return None
    config, _ = ls.checker.config_for(path)
    project = ls.checker.contexts_for(path, config)
    result = fix_file(path, display_path(path), document.source, findings, config, TraceOptions(), False, project)
    if not result.changed:
        return None
    return types.CodeAction(
        title="mpdoctor: fix all safe fixes",
        kind=convert.FIX_ALL,
        edit=types.WorkspaceEdit(changes={document.uri: [convert.whole_text_edit(document.lines, result.fixed)]}),
    )


def _overlap(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> tuple[int, int]:
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: MpdoctorServer, params: types.HoverParams) -> types.Hover | None:
    document = ls.requested(params.text_document.uri)
    if document is None:
        return None
    published = ls.published.get(document.uri)
    if published is None or published.text != document.source:
        return None  # the findings of an older text would point at the wrong code
    codec, lines, at = ls.workspace.position_codec, document.lines, params.position
    codes = [
        d.code
        for d in published.findings
        if _overlap(convert.diagnostic_range(codec, lines, d), types.Range(start=at, end=at))
    ]
    text = convert.hover_text(codes)
    if text is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))


@server.feature(types.SHUTDOWN)
def shutdown(ls: MpdoctorServer, params: None) -> None:
    ls.close()


def serve() -> int:
    """Run the server over stdio until the client says exit. The protocol keeps stdout to itself: anything else
    written there (mpdoctor's code, a library, a process it starts) goes to stderr instead."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        server.start_io(sys.stdin.buffer, protocol)
    finally:
        server.close()
    return 0
