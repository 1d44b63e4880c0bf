"""Test set-up: run Triton kernels through the CPU interpreter when no GPU is present.

GPU-only tests carry the `gpu` marker and are skipped without CUDA.
"""

import pytest

from swizzlelab.runtime import cuda_available, ensure_triton_backend

ensure_triton_backend()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
