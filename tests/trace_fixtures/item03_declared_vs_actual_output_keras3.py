# Item 3: a language model whose logits come from a tied reverse embedding (like keras-hub's GPT-2 and Gemma causal
# LMs): the layer declares its compute dtype, float16, but the float32 table promotes the matmul, so the model
# really returns float32. MP402 judges the dtype the call returns: nothing for `language_model`; the plain Dense
# head of `regressor` does return float16.
# fixture-codes: MP402 MP401
import numpy as np
import tensorflow as tf
import keras


class ReverseEmbedding(keras.layers.Layer):
    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def call(self, x):
        table = tf.cast(self.embedding.embeddings, tf.float32)
        return tf.matmul(tf.cast(x, tf.float32), table, transpose_b=True)

    def compute_output_shape(self, shape):
        return (*shape[:-1], self.embedding.input_dim)


keras.mixed_precision.set_global_policy("mixed_float16")
embedding = keras.layers.Embedding(100, 16)
token_ids = keras.Input((None,), dtype="int32")
hidden = keras.layers.Dense(16, activation="gelu")(embedding(token_ids))
language_model = keras.Model(token_ids, ReverseEmbedding(embedding)(hidden))

features = keras.Input((8,))
regressor = keras.Model(features, keras.layers.Dense(1)(features))  # expect: MP402

if __name__ == "__main__":  # ground truth: declared and returned dtypes
    print("declared", language_model.outputs[0].dtype)
    print("returned", language_model(np.zeros((2, 4), "int32")).dtype.name)
