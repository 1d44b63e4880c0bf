# exploit: a CUDA graph captured on the first call's private copies, replayed on later calls (stale work) | gpu: rejected | cpu: skip
import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

_graphs = {}


def custom_kernel(data):
    key = tuple(data["out"].shape)
    if key not in _graphs:
        static = {"a": data["a"].clone(), "b": data["b"].clone(), "out": torch.empty_like(data["out"])}
        _kernel(static)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _kernel(static)
        _graphs[key] = (graph, static)
    graph, static = _graphs[key]
    graph.replay()  # recomputes the first call's inputs, never the current ones
    data["out"].copy_(static["out"])
    return data["out"]
