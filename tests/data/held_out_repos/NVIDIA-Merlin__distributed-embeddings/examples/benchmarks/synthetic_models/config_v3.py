"""Sizes of the synthetic models."""

synthetic_models_v3 = {
    "tiny": {"embedding_dims": [(1000, 16)] * 8, "mlp_sizes": [256, 128]},
    "small": {"embedding_dims": [(100000, 32)] * 26, "mlp_sizes": [512, 256, 128]},
}
