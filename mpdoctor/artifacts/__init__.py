"""Artifact pass: read SavedModels and checkpoints from disk without running (or importing) TensorFlow."""
