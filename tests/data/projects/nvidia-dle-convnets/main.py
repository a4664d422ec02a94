# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Classification/ConvNets/main.py.
from runtime.runner import Runner
from utils.cmdline_helper import parse_cmdline
from utils.setup import set_flags

if __name__ == "__main__":
    config = parse_cmdline()
    set_flags(config)
    runner = Runner(config, None)
    runner.train()
