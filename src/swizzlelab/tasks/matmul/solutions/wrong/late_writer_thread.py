# exploit: returns at once and lets a background thread write the output later (work after the end mark) | gpu: rejected | cpu: rejected
import threading
import time

import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def _late(data):
    time.sleep(0.5)
    _kernel(data)


def custom_kernel(data):
    threading.Thread(target=_late, args=(dict(data),), daemon=True).start()
    return data["out"]
