# exploit: allocates device memory until something stops it | gpu: rejected | cpu: skip
import torch

_hoard = []


def custom_kernel(data):
    while True:
        _hoard.append(torch.ones(1 << 30, dtype=torch.float32, device="cuda"))  # 4 GiB each
