"""The static pass: facts from source text only. Nothing under this package may import TensorFlow."""
