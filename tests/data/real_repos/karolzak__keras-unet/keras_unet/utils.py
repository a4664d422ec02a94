import matplotlib.pyplot as plt
import numpy as np

from keras_unet import TF

if TF:
    from tensorflow.keras.preprocessing.image import ImageDataGenerator
else:
    from keras.preprocessing.image import ImageDataGenerator


def get_augmented(X_train, Y_train, X_val=None, Y_val=None, batch_size=32, seed=0, data_gen_args=dict(rotation_range=10.0, horizontal_flip=True)):
    X_datagen = ImageDataGenerator(**data_gen_args)
    Y_datagen = ImageDataGenerator(**data_gen_args)
    X_train_augmented = X_datagen.flow(X_train, batch_size=batch_size, shuffle=True, seed=seed)
    Y_train_augmented = Y_datagen.flow(Y_train, batch_size=batch_size, shuffle=True, seed=seed)
    return zip(X_train_augmented, Y_train_augmented)


def plot_imgs(org_imgs, mask_imgs, pred_imgs=None, nm_img_to_plot=10, figsize=4):
    fig, axes = plt.subplots(nm_img_to_plot, 2 if pred_imgs is None else 3, figsize=(figsize, figsize * nm_img_to_plot), squeeze=False)
    for m in range(nm_img_to_plot):
        axes[m, 0].imshow(org_imgs[m])
        axes[m, 1].imshow(np.squeeze(mask_imgs[m]))
    plt.close(fig)
