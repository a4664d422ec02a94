import setuptools

exec(open("keras_cv_attention_models/version.py").read())

setuptools.setup(
    name="keras-cv-attention-models",
    version=__version__,  # noqa: F821
    description="Tensorflow keras computer vision attention models. Alias kecam.",
    packages=setuptools.find_packages(exclude=["tests"]),
    install_requires=[
        "pillow",
        "tqdm",
        "ftfy",
        "regex",
        "tensorflow;platform_system!='Darwin'",
    ],
    python_requires=">=3.6",
)
