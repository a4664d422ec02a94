from .classification_models import *  # noqa: F401,F403
