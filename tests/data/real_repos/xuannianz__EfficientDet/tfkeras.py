import efficientnet as model
from utils import init_tfkeras_custom_objects, inject_tfkeras_modules

EfficientNetB0 = inject_tfkeras_modules(model.EfficientNetB0)
preprocess_input = inject_tfkeras_modules(model.preprocess_input)

init_tfkeras_custom_objects()
