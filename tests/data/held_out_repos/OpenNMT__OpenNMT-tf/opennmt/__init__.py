from opennmt.runner import Runner
from opennmt.version import __version__
