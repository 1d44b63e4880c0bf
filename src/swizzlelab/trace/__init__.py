"""Per-program memory access traces: the AccessTrace record, analytic builders and the interpreter tracer.

`TraceBuilder` builds traces from access models; `trace_kernel` records a Triton kernel under the interpreter.
"""

from swizzlelab.trace.builder import TensorRef, TraceBuilder
from swizzlelab.trace.compare import TraceDiff, compare_footprints, compare_traces
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo
from swizzlelab.trace.tracer import record_accesses, trace_call, trace_kernel

__all__ = [
    "AccessTrace",
    "TensorInfo",
    "TensorRef",
    "TraceBuilder",
    "TraceDiff",
    "compare_footprints",
    "compare_traces",
    "record_accesses",
    "trace_call",
    "trace_kernel",
]
