"""Makes tqdm and yaml (installed in mpdoctor's test environment) look not installed, as in a CI job that installed
only mpdoctor and TensorFlow: the import system's path finder no longer finds them."""

import sys
from importlib.machinery import PathFinder

HIDDEN = {"tqdm", "yaml"}


class PathFinderHiding(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [PathFinderHiding if finder is PathFinder else finder for finder in sys.meta_path]
