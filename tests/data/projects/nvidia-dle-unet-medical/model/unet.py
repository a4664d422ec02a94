# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Segmentation/UNet_Medical/model/unet.py.
"""U-Net built from the blocks of model/layers.py."""

import tensorflow as tf

from model.layers import BottleneckBlock, DownsampleBlock, InputBlock, OutputBlock, UpsampleBlock


class Unet(tf.keras.Model):
    def __init__(self):
        super().__init__(self)
        self.input_block = InputBlock(filters=64)
        self.bottleneck = BottleneckBlock(1024)
        self.output_block = OutputBlock(filters=64, n_classes=2)
        self.down_blocks = [DownsampleBlock(filters, idx) for idx, filters in enumerate([128, 256, 512])]
        self.up_blocks = [UpsampleBlock(filters, idx) for idx, filters in enumerate([512, 256, 128])]

    def call(self, x, training=True):
        skips = []
        out, residual = self.input_block(x)
        skips.append(residual)
        for block in self.down_blocks:
            out, residual = block(out)
            skips.append(residual)
        out = self.bottleneck(out, training)
        for block in self.up_blocks:
            out = block(out, skips.pop())
        return self.output_block(out, skips.pop())
