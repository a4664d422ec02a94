"""`mpdoctor server`: a Language Server Protocol server over stdio (pygls + lsprotocol, the `[server]` extra), as
`ruff server` is for ruff. `convert.py` maps findings to LSP data (diagnostics, code actions, hover), `workspace.py`
checks a buffer as `check` checks a file (configuration, target, project contexts, the trace on save) and `app.py`
holds the server: its handlers, the debounce, the trace worker. Nothing here imports TensorFlow: the trace runs in
its child process (from the fork server)."""
