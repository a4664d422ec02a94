"""Packaging of the `speech` package: `python setup.py` exits with "error: no commands supplied" (setup() parses
sys.argv and calls sys.exit), so it is no model code to trace."""
from setuptools import find_packages, setup

setup(name="speech", version="0.1", packages=find_packages(), install_requires=["tensorflow>=2.16", "keras"])
