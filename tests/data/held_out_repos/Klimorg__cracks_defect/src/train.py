"""Training of the crack classifier; the model, optimizer and loss classes come from the Hydra configs."""

import hydra
import tensorflow as tf
from loguru import logger
from omegaconf import DictConfig, OmegaConf

from utils import load_obj


@logger.catch()
@hydra.main(config_path="../configs/", config_name="params.yaml")
def train(config: DictConfig):
    conf_dict = OmegaConf.to_container(config, resolve=True)

    logger.info("Setting training policy.")
    policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
    tf.keras.mixed_precision.experimental.set_policy(policy)
    logger.info(f"Compute dtype : {policy.compute_dtype}")
    logger.info(f"Variable dtype : {policy.variable_dtype}")

    ds = tf.data.Dataset.from_tensors((tf.zeros((1, 128, 128, 3)), tf.one_hot([0], 2))).repeat(8)

    logger.info("Compiling model")
    cnn = load_obj(config.cnn.class_name)
    model = cnn(**conf_dict["cnn"]["params"])

    optim = load_obj(config.optimizer.class_name)
    optimizer = optim(**conf_dict["optimizer"]["params"])

    loss = load_obj(config.losses.class_name)
    loss = loss(**conf_dict["losses"]["params"])

    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])

    logger.info("Start training")
    model.fit(ds, epochs=config.training.epochs)


if __name__ == "__main__":
    train()
