"""The one error of the checkpoint readers, auditor and converter.

`CheckpointError(path, problem)`: `str()` is "PATH: problem", PATH naming the file at fault (the CLI prints it as
one line, without a traceback).
"""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint that cannot be read or written. `path` names the file at fault."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
