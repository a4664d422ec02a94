import tensorflow as tf
import tensorflow_hub as hub

tf.keras.mixed_precision.experimental.set_policy("mixed_float16")


def classifier(hub_module_url, fp16_implementation):
    input_word_ids = tf.keras.layers.Input(shape=(128,), dtype=tf.int32)
    input_mask = tf.keras.layers.Input(shape=(128,), dtype=tf.int32)
    core_model = hub.KerasLayer(hub_module_url, trainable=True)
    pooled_output, _ = core_model([input_word_ids, input_mask])
    output = tf.keras.layers.Dense(2, dtype="float32")(pooled_output)
    model = tf.keras.Model([input_word_ids, input_mask], output)
    optimizer = tf.keras.optimizers.Adam()
    if fp16_implementation == "graph_rewrite":
        optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model
