"""The trace pass: runs the user's model code in a child process (child.py) and turns what happened into facts.

Only runner.py and context.py are imported by the parent; nothing they import touches TensorFlow.
"""
