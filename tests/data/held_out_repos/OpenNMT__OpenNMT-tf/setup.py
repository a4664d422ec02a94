import os

from setuptools import find_packages, setup

here = os.path.abspath(os.path.dirname(__file__))


def read_version():
    namespace = {}
    with open(os.path.join(here, "opennmt", "version.py"), encoding="utf-8") as handle:
        exec(handle.read(), namespace)
    return namespace


version = read_version()
tf_version_requirement = ">=%s,<%s" % (
    version["INCLUSIVE_MIN_TF_VERSION"],
    version["EXCLUSIVE_MAX_TF_VERSION"],
)

setup(
    name="OpenNMT-tf",
    version=version["__version__"],
    python_requires=">=3.7",
    packages=find_packages(exclude=["bin", "*.tests"]),
    install_requires=[
        "ctranslate2>=3.0,<4",
        "pyyaml>=5.3,<7",
        "tensorflow-addons>=0.16,<0.22",
    ],
    extras_require={
        "tensorflow": [
            "tensorflow" + tf_version_requirement,
            "tensorflow-text" + tf_version_requirement,
        ],
    },
    entry_points={"console_scripts": ["onmt-main=opennmt.bin.main:main"]},
)
