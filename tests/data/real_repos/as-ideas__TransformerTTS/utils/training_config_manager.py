import subprocess
from pathlib import Path

import numpy as np
import ruamel.yaml
import tensorflow as tf

from model.models import ForwardTransformer


class TrainingConfigManager:
    def __init__(self, config_path: str, aligner=False):
        self.model_kind = "aligner" if aligner else "tts"
        self.config_path = Path(config_path)
        self.yaml = ruamel.yaml.YAML()
        self.config = self._load_config()
        self.git_hash = self._get_git_hash()
        self.data_name = self.config["data_name"]
        self.session_names = {"data": f"{self.config['text_settings_name']}.{self.config['audio_settings_name']}"}
        self.session_names["tts"] = f"{self.config['tts_settings_name']}.{self.config['aligner_settings_name']}"
        self.base_dir = Path(self.config["log_directory"]) / self.data_name / self.session_names[self.model_kind]
        self.learning_rate = np.array(self.config["learning_rate_schedule"])[0, 1].astype(np.float32)

    def _load_config(self):
        with open(str(self.config_path), "rb") as session_yaml:
            return self.yaml.load(session_yaml)

    @staticmethod
    def _get_git_hash():
        try:
            return subprocess.check_output(["git", "describe", "--always"]).strip().decode()
        except Exception as e:
            print(f"WARNING: could not retrieve git hash. {e}")

    def get_model(self, ignore_hash=False):
        return ForwardTransformer.from_config(self.config)

    def compile_model(self, model, beta_1=0.9, beta_2=0.98):
        optimizer = tf.keras.optimizers.Adam(self.learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=1e-9)
        model._compile(optimizer=optimizer)
