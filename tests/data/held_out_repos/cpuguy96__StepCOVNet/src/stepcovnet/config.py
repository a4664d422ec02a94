"""Experiment configuration (reduced to the fields the trainers read)."""

import dataclasses


@dataclasses.dataclass
class OnsetDatasetConfig:
    data_dir: str = ""
    val_data_dir: str = ""
    batch_size: int = 1
    use_gaussian_target: bool = False


@dataclasses.dataclass
class OnsetModelConfig:
    initial_filters: int = 16
    depth: int = 2
    dropout_rate: float = 0.0


@dataclasses.dataclass
class ArrowModelConfig:
    num_layers: int = 1
    d_model: int = 128
    num_heads: int = 4
    ff_dim: int = 512
    dropout_rate: float = 0.0


@dataclasses.dataclass
class RunConfig:
    epoch: int = 10
    model_output_dir: str = ""
    model_name: str = ""
