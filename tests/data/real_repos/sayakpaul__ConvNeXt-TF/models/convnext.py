"""The PyTorch ConvNeXt the weights are ported from (reduced to its timm registration)."""

import torch.nn as nn
from timm.models.registry import register_model


class ConvNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=1000, depths=[3, 3, 9, 3], dims=[96, 192, 384, 768]):
        super().__init__()
        self.head = nn.Linear(dims[-1], num_classes)


@register_model
def convnext_tiny(pretrained=False, **kwargs):
    return ConvNeXt(depths=[3, 3, 9, 3], dims=[96, 192, 384, 768], **kwargs)
