# Box overlaps, compiled with `python setup.py build_ext --inplace` (reduced).
cimport cython
import numpy as np
cimport numpy as np


def compute_overlap(np.ndarray[double, ndim=2] boxes, np.ndarray[double, ndim=2] query_boxes):
    cdef unsigned int N = boxes.shape[0]
    cdef unsigned int K = query_boxes.shape[0]
    cdef np.ndarray[double, ndim=2] overlaps = np.zeros((N, K), dtype=np.float64)
    return overlaps
