"""stepnet: a src-layout package (importable after `pip install -e .`, or with PYTHONPATH=src)."""
