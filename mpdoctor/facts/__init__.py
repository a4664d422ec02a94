"""What both passes know, as data: dtypes and policies (dtypes.py), the one encoding of Keras' behaviour that both
passes rely on (keras_semantics.py), and the typed schema of the trace facts (schema.py).

Nothing here imports TensorFlow, Keras or anything else of mpdoctor: the trace child, the static pass, the rules and
the renderers all build on it.
"""
