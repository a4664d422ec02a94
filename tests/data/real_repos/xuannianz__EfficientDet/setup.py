from distutils.core import setup

import numpy
from Cython.Build import cythonize

setup(ext_modules=cythonize("utils/compute_overlap.pyx"), include_dirs=[numpy.get_include()])
