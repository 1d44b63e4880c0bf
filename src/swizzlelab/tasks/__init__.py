"""The task library: kernels to swizzle, each with inputs, a reference, a check and a library baseline.

`load_task(name_or_path)` loads a built-in task or a user's own folder; `list_tasks()` lists the built-in ones.
"""

from swizzlelab.tasks.checking import CheckResult, Tolerance, compare, tolerance_for
from swizzlelab.tasks.protocol import KernelTask, Verdict
from swizzlelab.tasks.registry import Task, TaskSpec, builtin_names, list_tasks, load_spec, load_task

__all__ = [
    "CheckResult",
    "KernelTask",
    "Task",
    "TaskSpec",
    "Tolerance",
    "builtin_names",
    "compare",
    "list_tasks",
    "load_spec",
    "load_task",
    "tolerance_for",
    "Verdict",
]
