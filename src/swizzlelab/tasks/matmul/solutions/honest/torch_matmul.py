# honest: PyTorch (cuBLAS on the GPU) writing into the given output | gpu: honest_time | cpu: pass
import torch


def custom_kernel(data):
    return torch.matmul(data["a"], data["b"], out=data["out"])
