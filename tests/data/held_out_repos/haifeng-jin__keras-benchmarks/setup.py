from setuptools import find_packages, setup

setup(name="benchmark", packages=find_packages(exclude=("*test*",)))
