"""Reads a configuration file that is not there: running it raises FileNotFoundError at line 6, which no rule
explains (not traced itself: it uses no TensorFlow; its importer's MP001 stays)."""

import json

with open("settings.json") as handle:
    SETTINGS = json.load(handle)
