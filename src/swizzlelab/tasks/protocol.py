"""What every task a scenario works on answers, whether a task folder (`Task`) or a user's kernel file
(`swizzlelab.userkernel.UserTask`): the one interface the scenario, the harness and the optimizer call."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Verdict(Protocol):
    """A check's answer on one output: `message` is one line a user can act on."""

    ok: bool
    message: str


@runtime_checkable
class KernelTask(Protocol):
    """Inputs, a launcher and a check for one kernel. `custom_kernel(data, order, config)` runs the kernel in
    `order` (None: its own) and returns its output; `check(data, output)` says whether that output is right;
    `parse_order` reads a family spec on the task's grid rank. A task with `has_access_model` also builds an
    analytic trace (Task.access_model); one without is traced by running it."""

    @property
    def name(self) -> str: ...

    @property
    def has_access_model(self) -> bool: ...

    def case_label(self, case: dict[str, Any]) -> str: ...

    def parse_order(self, spec: str) -> Any: ...

    def generate_input(self, case: dict[str, Any]) -> dict[str, Any]: ...

    def custom_kernel(self, data: dict[str, Any], order: Any = None, config: Any = None) -> Any: ...

    def check(self, data: dict[str, Any], output: Any) -> Verdict: ...
