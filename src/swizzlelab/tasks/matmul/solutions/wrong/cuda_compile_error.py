# exploit: CUDA C++ that nvcc rejects (load_inline build error) | gpu: rejected | cpu: rejected
from torch.utils.cpp_extension import load_inline

_ext = load_inline("swizzlelab_broken", cpp_sources="torch::Tensor f(torch::Tensor x);",
                   cuda_sources="torch::Tensor f(torch::Tensor x) { return x + undefined_symbol; }",
                   functions=["f"], verbose=False)


def custom_kernel(data):
    return _ext.f(data["out"])
