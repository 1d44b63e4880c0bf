# exploit: allocates and touches host memory until something stops it | gpu: rejected | cpu: rejected | slow
import numpy as np

_hoard = []


def custom_kernel(data):
    while True:
        _hoard.append(np.ones(1 << 27, dtype=np.float64))  # 1 GiB, touched
