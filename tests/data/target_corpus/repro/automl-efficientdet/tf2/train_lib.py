import tensorflow as tf
import tensorflow_hub as hub


def get_optimizer(params):
    optimizer = tf.keras.optimizers.SGD(params["learning_rate"], momentum=0.9)
    if params["mixed_precision"]:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


class EfficientDetNetTrainHub(tf.keras.Model):
    def __init__(self, hub_module_url):
        super().__init__()
        self.base_model = hub.KerasLayer(hub_module_url, trainable=True)

    def train_step(self, data):
        images, labels = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.base_model(images, training=True) - labels))
            if isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
                scaled_loss = self.optimizer.get_scaled_loss(loss)
            else:
                scaled_loss = loss
        scaled_gradients = tape.gradient(scaled_loss, self.trainable_variables)
        if isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
            gradients = self.optimizer.get_unscaled_gradients(scaled_gradients)
        else:
            gradients = scaled_gradients
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        return {"loss": loss}
