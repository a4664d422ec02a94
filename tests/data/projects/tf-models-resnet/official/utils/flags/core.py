# Abridged excerpt (see SOURCE.md): tensorflow/models official/utils/flags/core.py.
from official.utils.flags import _performance

define_performance = _performance.define_performance
get_tf_dtype = _performance.get_tf_dtype
