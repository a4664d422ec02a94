from . import recognition, tools

__version__ = "0.0.0"
