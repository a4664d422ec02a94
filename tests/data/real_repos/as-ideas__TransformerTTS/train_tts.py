"""Trains the forward TTS model: `python train_tts.py --config config/training_config.yaml` (reduced: the dataset,
summaries and checkpoints left out; random phoneme ids and mels stand in for the preprocessed LJSpeech)."""

import numpy as np
import tensorflow as tf
from tqdm import trange

from utils.scripts_utils import basic_train_parser, dynamic_memory_allocation
from utils.training_config_manager import TrainingConfigManager

np.random.seed(42)
tf.random.set_seed(42)
dynamic_memory_allocation()

parser = basic_train_parser()
args = parser.parse_args()

config_manager = TrainingConfigManager(config_path=args.config)
config_dict = config_manager.config
model = config_manager.get_model()
config_manager.compile_model(model)

phonemes = np.random.randint(1, 27, (2, 12))
mels = np.random.rand(2, 12, config_dict["mel_channels"]).astype("float32")
t = trange(model.step, config_dict["max_steps"], leave=True)
for _ in t:
    model.train_on_batch(phonemes, mels)
    model.step += 1
