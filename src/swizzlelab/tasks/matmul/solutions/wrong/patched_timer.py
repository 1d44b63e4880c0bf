# exploit: replaces torch.cuda.Event.elapsed_time / record and time.perf_counter at import | gpu: honest_time | cpu: pass
import time

import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

torch.cuda.Event.elapsed_time = lambda self, other: 0.001
torch.cuda.Event.record = lambda self, stream=None: None
time.perf_counter = lambda: 0.0


def custom_kernel(data):
    return _kernel(data)
