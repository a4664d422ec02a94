"""Every Python started with this directory on PYTHONPATH and MPDOCTOR_TEST_BLOCK_TF=1 (the children of a test
run: `python -m mpdoctor`, the trace child) cannot import TensorFlow either (tf_blocker.py)."""

import os

if os.environ.get("MPDOCTOR_TEST_BLOCK_TF") == "1":
    import tf_blocker

    tf_blocker.install()
