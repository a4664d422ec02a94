"""A KerasHub causal LM with the precision policy set before the preset is loaded."""

from typing import Optional

from keras_hub.models import CausalLM

from kithara.model.model import set_precision


class KerasHubModel:
    def __init__(self, model, model_name, precision, lora_rank=None):
        self.model = model
        self.model_name = model_name
        self.precision = precision
        self.lora_rank = lora_rank

    @classmethod
    def from_preset(cls, preset_handle: str, lora_rank: Optional[int] = None, precision: str = "mixed_float16", **kwargs) -> "KerasHubModel":
        """precision: "float32", "float16", "bfloat16", "mixed_float16" or "mixed_bfloat16"."""
        model_name = preset_handle.rsplit("/", 1)[-1]
        set_precision(precision)
        model = CausalLM.from_preset(preset_handle, preprocessor=None, **kwargs)
        if lora_rank:
            model.backbone.enable_lora(rank=lora_rank)
        return cls(model, model_name=model_name, precision=precision, lora_rank=lora_rank)
