"""Quick start: LoRA fine-tuning of Gemma 2 2B from Hugging Face with mixed bfloat16 on one host."""

import os

os.environ["KERAS_BACKEND"] = "jax"
import keras

from kithara import KerasHubModel, Trainer

config = {
    "model_handle": "hf://google/gemma-2-2b",
    "seq_len": 4096,
    "lora_rank": 16,
    "precision": "mixed_bfloat16",
    "training_steps": 60,
    "learning_rate": 2e-4,
}


def run_workload(train_dataloader=None):
    model = KerasHubModel.from_preset(
        config["model_handle"],
        precision=config["precision"],
        lora_rank=config["lora_rank"],
    )
    optimizer = keras.optimizers.AdamW(learning_rate=config["learning_rate"], weight_decay=0.01)
    trainer = Trainer(model=model, optimizer=optimizer, train_dataloader=train_dataloader, steps=config["training_steps"])
    trainer.train()


if __name__ == "__main__":
    run_workload()
