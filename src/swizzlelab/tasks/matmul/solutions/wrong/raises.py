# exploit: raises inside custom_kernel | gpu: rejected | cpu: rejected
def custom_kernel(data):
    raise RuntimeError("kernel crashed on purpose")
