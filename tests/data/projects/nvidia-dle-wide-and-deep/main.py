# Abridged excerpt (see SOURCE.md): NVIDIA DeepLearningExamples, TensorFlow2/Recommendation/WideAndDeep/main.py.
from trainer.model.widedeep import wide_deep_model
from trainer.utils.arguments import parse_args
from trainer.utils.setup import create_config


def main():
    args = parse_args()
    config = create_config(args)
    model, _ = wide_deep_model(args)
    return model, config


if __name__ == "__main__":
    main()
