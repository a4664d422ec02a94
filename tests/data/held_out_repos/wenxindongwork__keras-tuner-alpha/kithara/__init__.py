from kithara.model.kerashub.keras_hub_model import KerasHubModel
from kithara.trainer import Trainer
