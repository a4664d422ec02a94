"""ALBERT/BERT pretraining with Horovod, XLA and mixed precision (the TF 2 graph rewrite + loss scaling)."""

import argparse

import horovod.tensorflow as hvd
import tensorflow as tf
from transformers import TFAutoModelForPreTraining

from common.models import create_model

max_grad_norm = 1.0


def train_step(model, optimizer, gradient_accumulator, batch):
    with tf.GradientTape() as tape:
        output = model(batch["input_ids"], attention_mask=batch["input_mask"], training=True)
        mlm_loss = tf.keras.losses.sparse_categorical_crossentropy(
            batch["masked_lm_ids"], output.prediction_logits, from_logits=True
        )
        sop_loss = tf.keras.losses.sparse_categorical_crossentropy(
            batch["next_sentence_labels"], output.sop_logits, from_logits=True
        )
        loss = tf.cast(tf.reduce_mean(mlm_loss), dtype=tf.float32) + tf.cast(tf.reduce_mean(sop_loss), dtype=tf.float32)
        scaled_loss = optimizer.get_scaled_loss(loss)

    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    gradient_accumulator(scaled_grads)
    return loss


def allreduce(model, optimizer, gradient_accumulator):
    scaled_grads = gradient_accumulator.gradients
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    (grads, grad_norm) = tf.clip_by_global_norm(grads, clip_norm=max_grad_norm)
    grads = [hvd.allreduce(grad, compression=hvd.Compression.fp16) if grad is not None else None for grad in grads]
    optimizer.apply_gradients([(tf.cast(grad, var.dtype), var) for (grad, var) in zip(grads, model.trainable_variables)])
    gradient_accumulator.reset()
    return grad_norm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_type", default="albert")
    parser.add_argument("--model_desc", default="albert-base-v2")
    parser.add_argument("--load_from", default="scratch")
    parser.add_argument("--learning_rate", type=float, default=0.00176)
    model_args = parser.parse_args()

    hvd.init()
    tf.config.optimizer.set_jit(True)

    optimizer = tf.keras.optimizers.Adam(model_args.learning_rate)
    optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer, loss_scale="dynamic")

    model = create_model(model_class=TFAutoModelForPreTraining, model_args=model_args)
    return model, optimizer


if __name__ == "__main__":
    main()
