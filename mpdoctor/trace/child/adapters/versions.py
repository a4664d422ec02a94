"""What a Keras package says it is (shared by the adapters' `handles`)."""

from __future__ import annotations

import types


def major_version(package: types.ModuleType) -> int | None:
    """The major version a Keras package says it is (`__version__`), None when it says nothing readable."""
    try:
        return int(str(package.__version__).split(".")[0])
    except (AttributeError, ValueError):
        return None
