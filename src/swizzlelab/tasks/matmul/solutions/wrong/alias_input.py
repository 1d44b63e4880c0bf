# exploit: returns an alias of an input instead of computing | gpu: rejected | cpu: rejected
def custom_kernel(data):
    a, out = data["a"], data["out"]
    m, n = out.shape
    return a.reshape(-1)[: m * n].reshape(m, n) if a.numel() >= m * n else a
