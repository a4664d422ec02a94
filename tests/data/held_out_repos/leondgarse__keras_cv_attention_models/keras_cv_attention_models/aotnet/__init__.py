from keras_cv_attention_models.aotnet.aotnet import AotNet, AotNet50, AotNet101
