"""The trace pass: runs the user's model code in a child process (child/) and turns what happened into facts.

Everything here but child/ is the parent side, and nothing it imports touches TensorFlow. The context trace checks
get (`TraceContext`) lives in mpdoctor.trace_context, which the rules import too.
"""
