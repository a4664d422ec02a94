from __future__ import absolute_import, division, print_function

from .layer import Layer  # noqa: F401
from .model import BertModelLayer  # noqa: F401
from .version import __version__  # noqa: F401
