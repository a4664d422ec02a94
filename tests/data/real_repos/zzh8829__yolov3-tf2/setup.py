from setuptools import setup

setup(name="yolov3_tf2", version="0.1", url="https://github.com/zzh8829/yolov3-tf2", author="Zihao Zhang", packages=["yolov3_tf2"])
