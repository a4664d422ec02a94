"""tfts package for time series prediction with TensorFlow"""

from tfts.data import get_data
from tfts.models.auto_config import AutoConfig
from tfts.models.auto_model import AutoModel
from tfts.trainer import KerasTrainer, set_seed

__all__ = ["AutoModel", "AutoConfig", "KerasTrainer", "set_seed", "get_data"]
