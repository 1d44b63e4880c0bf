"""One isolated evaluation's conversation with its child: deadlines, shared input buffers, single calls, timed
requests with the parent's own flush and probe, and the parent's verdict on every output it looks at.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import swizzlelab
from swizzlelab.harness.correctness import CaseResult, RunCheck, case_sizes, count_poisoned, derive_seed, poison_
from swizzlelab.harness.evaluate import Candidate
from swizzlelab.harness.isolate import vmm
from swizzlelab.harness.isolate.clock_stats import Calibration
from swizzlelab.harness.isolate.limits import Limits
from swizzlelab.harness.isolate.options import ProgressFn
from swizzlelab.harness.isolate.sandbox import ChildFailed, ChildProcess, one_line
from swizzlelab.harness.isolate.transport import SlotSet
from swizzlelab.harness.requests import pool_size

SEAL_N = 1024  # output elements sampled right after each call ends (a call must be complete when it returns)
SEAL_WAIT_S = 5.0  # after that the seal check refuses the request anyway


@dataclass
class Prepared:
    """A benchmark case bound and calibrated before the submission exists in the child."""

    seed: int
    data0: dict[str, Any]
    pool: list[SlotSet]
    calibration: Calibration | None  # None only while timed_requests.prepare_cases calibrates it
    pool_size: int


def secret_seed(secret: bytes, case_seed: int, salt: str) -> int:
    """A 31-bit seed from the leaderboard's secret, the case's seed and a salt (HMAC-SHA256): not predictable
    without the secret, reproducible with it."""
    digest = hmac.new(secret, f"{int(case_seed)}|{salt}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class Session:
    """One evaluate_isolated call: the child, its deadlines, the seeds, the bound input sets, the verdicts and
    where the time went."""

    def __init__(self, task: Any, mode: str, limits: Limits, secret: bytes | None, budget_s: float,
                 progress: ProgressFn | None, with_baseline: bool, workdir: Path, drop_to: int | None):
        from swizzlelab.runtime import device

        self.task, self.mode, self.limits, self.budget_s = task, mode, limits, budget_s
        self.secret = secret if secret is not None else os.urandom(32)
        self.secret_given = secret is not None
        self.progress = progress
        self.with_baseline = with_baseline
        self.workdir = workdir
        self.on_gpu = device() == "cuda"
        self.kind = "vmm" if self.on_gpu else "host"
        builtin = Path(task.path).resolve().parent == Path(swizzlelab.__file__).resolve().parent / "tasks"
        self.child = ChildProcess(limits, self.on_gpu, workdir, drop_to,
                                  extra_read=() if builtin else (str(Path(task.path).resolve()),))
        self.formula: Any = None
        self.order_spec: str | None = None
        self.own_kernel = False
        self.clock_info: dict[str, Any] = {}
        self.drop_to = drop_to
        self.compile_deadline = 0.0
        self.run_deadline = 0.0
        self.verdicts: list[dict[str, Any]] = []
        self.rng = random.SystemRandom()
        self.child_system: dict[str, Any] = {}
        self.sandbox: dict[str, Any] = {}
        self.first_call_done = False
        self.transport_note = ""
        self.cpu_timing = False
        self._flush_buffer: Any = None
        self._probe_buffer: Any = None
        self.prepared: dict[int, Prepared] = {}
        self.calibrations: dict[int, Calibration] = {}
        self.next_id = 0
        self.phases: dict[str, float] = {}
        self.on_started: Callable[[], None] = lambda: None  # after the child's trusted start, before the submission

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def deadline(self) -> tuple[float, str]:
        if not self.first_call_done:
            return self.compile_deadline, "compile"
        return self.run_deadline, "run"

    def ask(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        deadline, phase = self.deadline()
        return self.child.request(message, deadline, phase)

    # -- set-up ----------------------------------------------------------------------------------------------
    def phase(self, name: str, since: float) -> float:
        """Add the seconds since `since` to phase `name` (where a run's time goes); returns now."""
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - since
        return now

    def start_child(self) -> float:
        """Start the child and bind its trusted clock (no submission yet); returns the time this phase ended."""
        mark = time.perf_counter()
        self.child.start()
        self.compile_deadline = time.monotonic() + self.limits.compile_s
        reply, _ = self.ask({"op": "init", "gpu_mem_bytes": self.limits.gpu_mem_bytes,
                             "cpu_timing": self.cpu_timing, "expect_gpu": self.on_gpu})
        if not reply.get("ok"):
            raise ChildFailed(one_line(reply.get("error", "the child could not start")))
        mark = self.phase("child start (sandbox, torch, CUDA, clock)", mark)
        self.on_started()
        self.child_system = dict(reply.get("system") or {})
        self.clock_info = dict(reply.get("clock") or {})
        self.sandbox = dict(reply.get("sandbox") or {})
        applied, skipped = self.child.sandbox_notes()
        self.sandbox["applied"] = list(self.sandbox.get("applied") or []) + applied
        self.sandbox["skipped"] = list(self.sandbox.get("skipped") or []) + skipped
        return mark

    def load_submission(self, submission: Path) -> None:
        """The child imports the submission (and the order, proved by the parent)."""
        load: dict[str, Any] = {"op": "load", "path": str(submission)}
        if self.formula is not None:
            load["order"] = {"source": self.formula.normalized_source(), "outputs": list(self.formula.outputs)}
        reply, _ = self.ask(load)
        if not reply.get("ok"):
            raise ChildFailed(one_line(reply.get("error", "the submission could not be loaded")))

    def bench_seed(self, case: dict[str, Any], salt: str | None) -> int:
        if salt and self.secret_given:
            return secret_seed(self.secret, case["seed"], salt)
        return derive_seed(case["seed"], salt) if salt else int(case["seed"])

    def request(self, group: list[SlotSet], null: bool = False) -> tuple[dict[str, Any], float]:
        """One timed request over `group`; the wall time (ms) runs from the request until the parent's own
        probe kernel after the answer has finished, so GPU work the child left running is inside it."""
        self._settle()
        start = time.perf_counter()
        reply, _ = self.ask({"op": "calls", "ids": [slots.id for slots in group], "null": null})
        self._probe()
        if reply.get("ok"):
            # Contexts take turns on the GPU in time slices, so the probe alone can finish while work the child
            # left queued still runs (measured: a child that skipped its synchronize). The last call's seal is
            # written in stream order after every call of the request: the wall clock runs until it is there.
            give_up = time.monotonic() + SEAL_WAIT_S
            while not group[-1].seal_written() and time.monotonic() < give_up:
                pass
        wall_ms = (time.perf_counter() - start) * 1e3
        if not null and not self.first_call_done:
            self.first_call_done = True
            self.run_deadline = time.monotonic() + self.limits.run_s
        return reply, wall_ms

    def _probe(self) -> None:
        """A tiny kernel of the parent's, waited for: it cannot finish while work the child left on the GPU
        still runs (contexts take turns), so the parent's wall clock of a call covers that work too."""
        if self.on_gpu:
            import torch

            if self._probe_buffer is None:
                self._probe_buffer = torch.zeros(1, dtype=torch.int32, device="cuda")
            self._probe_buffer.add_(1)
            torch.cuda.synchronize()

    # -- one call ------------------------------------------------------------------------------------------
    def bind(self, data: dict[str, Any]) -> SlotSet:
        """Shared buffers for one case, mapped by the child; device buffers fall back to shared host memory."""
        while True:
            try:
                slots = SlotSet(data, self.kind, self.workdir / "slots", self.drop_to, seal_n=SEAL_N)
            except OSError as err:  # the driver refused an exportable allocation
                if self.kind != "vmm" or self.first_call_done:
                    raise
                self.transport_note = f"device buffers by file descriptor failed ({one_line(err)}); shared host memory"
                self.kind = "host"
                continue
            self.next_id += 1
            slots.id = self.next_id
            fd = slots.export_fd()
            if fd is not None:
                assert self.child.fd_socket is not None
                try:
                    vmm.send_fd(self.child.fd_socket, fd)
                except OSError:
                    slots.close()
                    raise ChildFailed(self.child._death()) from None
            reply, _ = self.ask({"op": "bind", "id": slots.id, "spec": slots.spec()})
            if reply.get("ok"):
                return slots
            slots.close()
            if self.kind == "vmm" and not self.first_call_done:
                self.transport_note = (f"device buffers by file descriptor failed ({one_line(reply.get('error', ''))});"
                                       " shared host memory")
                self.kind = "host"
                continue
            raise ChildFailed(one_line(reply.get("error", "the child could not map the inputs")))

    def unbind(self, slots: SlotSet) -> None:
        try:
            self.ask({"op": "unbind", "id": slots.id})
        finally:
            slots.close()

    def _settle(self) -> None:
        """The parent's own L2 flush before every call (empty or real), so the child's flush always evicts
        the same dirty lines whatever the parent computed before (its checks touch hundreds of MB)."""
        if self.on_gpu:
            import torch

            if self._flush_buffer is None:
                l2 = int(self.child_system.get("l2_bytes") or 0) or (128 << 20)
                self._flush_buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
            self._flush_buffer.fill_(self.rng.randrange(1 << 30))
            torch.cuda.synchronize()

    def call(self, slots: SlotSet, data: dict[str, Any], timed: bool) -> dict[str, Any]:
        """One call on fresh inputs whose output is judged, not timed (tests, the first and last checks of a
        benchmark case): `timed` runs it through the child's timing path, as a timed call sees it."""
        slots.load(data)
        poison_(slots.out)
        if self.on_gpu:
            import torch

            # The copy and the poison run on the parent's stream; the child's context does not wait for them, so
            # without this a kernel that accumulates into its output (histogram: zero, then atomics) can race
            # the poison (measured on an H100: poison + counts in the output of an honest kernel).
            torch.cuda.synchronize()
        reply, _ = self.ask({"op": "call", "id": slots.id, "timed": timed})
        if not self.first_call_done:
            self.first_call_done = True
            self.run_deadline = time.monotonic() + self.limits.run_s
        return reply

    def judge(self, slots: SlotSet, data: dict[str, Any], reply: dict[str, Any], seed: int) -> RunCheck:
        """The parent's verdict on the output slot after one call, from its own copy of the inputs."""
        if not reply.get("ok"):
            return RunCheck(seed=seed, passed=False, message=one_line(reply.get("error", "the call failed")),
                            n_bad=-1, max_abs_err=math.inf)
        returned = str(reply.get("returned", ""))
        if returned not in ("out", "copied"):
            return RunCheck(seed=seed, passed=False, message=one_line(f"the kernel {returned}"), n_bad=-1,
                            max_abs_err=math.inf)
        output = slots.out.clone()
        changed = slots.inputs_intact(data)
        if changed is not None:
            return RunCheck(seed=seed, passed=False, n_bad=-1, max_abs_err=math.inf,
                            message=f"the kernel wrote into its input {changed!r}")
        try:
            verdict = self.task.check(data, output)
        except Exception as err:  # the task's check is trusted code; a crash on odd output is a failure
            return RunCheck(seed=seed, passed=False, n_bad=-1, max_abs_err=math.inf,
                            message=one_line(f"the check raised {type(err).__name__}: {err}"))
        n_poisoned, first = count_poisoned(output, output.dtype)
        ok = bool(getattr(verdict, "ok", verdict))
        message = str(getattr(verdict, "message", "passed" if ok else "failed"))
        if n_poisoned and not ok:
            message += f"; {n_poisoned} elements still hold the poison value, first at {first}"
        return RunCheck(seed=seed, passed=ok, message=message, n_bad=int(getattr(verdict, "n_bad", 0 if ok else -1)),
                        max_abs_err=float(getattr(verdict, "max_abs_err", 0.0)),
                        worst_index=getattr(verdict, "worst_index", None), n_poisoned=n_poisoned)

    def order_info(self, case: dict[str, Any]) -> dict[str, Any]:
        from swizzlelab.harness.evaluate import order_info

        candidate = Candidate(fn=lambda data: None, source="", order_spec=self.order_spec, formula=self.formula,
                              submission=None if self.own_kernel else "submission")
        return order_info(self.task, candidate, case)

    def check_once(self, slots: SlotSet, case: dict[str, Any], seed: int) -> RunCheck:
        data = self.task.generate_input({"seed": int(seed), **case_sizes(case)})
        reply = self.call(slots, data, timed=False)
        return self.judge(slots, data, reply, seed)

    # -- modes -----------------------------------------------------------------------------------------------
    def run_tests(self) -> list[CaseResult]:
        results = []
        for index, case in enumerate(self.task.cases("tests")):
            seed = int(case["seed"])
            data = self.task.generate_input({"seed": seed, **case_sizes(case)})
            slots = self.bind(data)
            try:
                result = CaseResult(case=dict(case))
                result.runs.append(self.judge(slots, data, self.call(slots, data, timed=False), seed))
                if result.runs[0].passed:
                    result.runs.append(self.check_once(slots, case, derive_seed(seed, "recheck")))
            finally:
                self.unbind(slots)
            result.order = self.order_info(case)
            results.append(result)
            self.verdicts.append({"case": dict(case), "kind": "test", "passed": result.passed,
                                  "reason": None if result.passed else f"test {index}: {result.message}"})
            self.note(self.task.case_label(case))
        return results

    def bind_case(self, case: dict[str, Any], seed: int, calibration: Calibration | None) -> Prepared:
        """A case's first input bound in one slot set, and the pool size its timing will use."""
        data0 = self.task.generate_input({"seed": seed, **case_sizes(case)})
        slots = self.bind(data0)
        total = 0
        if self.on_gpu:
            import torch

            total = int(torch.cuda.get_device_properties(0).total_memory)
        return Prepared(seed, data0, [slots], calibration, pool_size(slots.nbytes(), self.on_gpu, total))

    def switch_to_secret(self, secret: bytes) -> None:
        """From here on, inputs come from the leaderboard's secret (the secret phase of a ranked run, in the same
        child after the public benchmarks). The clocks' calibration of each case was made before the submission
        was imported, through buffers of the same sizes, and stays valid."""
        self.secret, self.secret_given = secret, True

    def load_group(self, group: list[SlotSet], seeds: list[int], sizes: dict[str, Any]) -> list[dict[str, Any]]:
        inputs = []
        for slots, rep_seed in zip(group, seeds):
            data = self.task.generate_input({"seed": rep_seed, **sizes})
            slots.load(data)
            poison_(slots.out)
            slots.arm_seal(self.rng.getrandbits(62))
            inputs.append(data)
        return inputs

