from keras_unet import TF

if TF:
    import tensorflow.keras.backend as K
else:
    import keras.backend as K


def iou(y_true, y_pred, smooth=1.0):
    intersection = K.sum(K.abs(y_true * y_pred))
    union = K.sum(y_true) + K.sum(y_pred) - intersection
    return (intersection + smooth) / (union + smooth)
