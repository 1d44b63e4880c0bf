"""Profile mode of an isolated run: Nsight Compute over a sandboxed child that runs the submission once per
benchmark case. Correctness comes from the isolated tests run before; the profiled child's own check is shown
as what it is (reported by untrusted code).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import swizzlelab
from swizzlelab.errors import UserError
from swizzlelab.harness.evaluate import ProfileRow

# Nsight Compute injects a library into the target that talks to the front end over sockets and files in /tmp,
# so the profiled child gets rlimits, the scrubbed environment, dropped capabilities, seccomp (ptrace and
# process_vm_* refused) and a PID namespace shared with ncu, but no network namespace, no private root, no landlock
# and no socket rule (docs/isolation.md).
PROFILE_BOOT = (
    "import sys, json, importlib.util\n"
    "src, cfg = sys.argv[1], json.loads(sys.argv[2])\n"
    "spec = importlib.util.spec_from_file_location('_swizzlelab_sandbox', src + '/swizzlelab/harness/isolate/limits.py')\n"
    "lim = importlib.util.module_from_spec(spec); sys.modules['_swizzlelab_sandbox'] = lim; spec.loader.exec_module(lim)\n"
    "lim.apply_sandbox(lim.Limits(**cfg['limits']), True, cfg['drop_to'], True, stage='all')\n"
    "sys.path.insert(0, src)\n"
    "from swizzlelab.harness.profile_child import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)
# ncu and the profiled child run in a PID namespace of their own: the child can signal ncu, never the worker.
NAMESPACE_EXEC = (
    "import sys, importlib.util\n"
    "spec = importlib.util.spec_from_file_location('_swizzlelab_jail', sys.argv[1] + '/swizzlelab/harness/isolate/jail.py')\n"
    "jail = importlib.util.module_from_spec(spec); spec.loader.exec_module(jail)\n"
    "jail.exec_in_namespace(sys.argv[2:])\n"
)
SRC_ROOT = str(Path(swizzlelab.__file__).resolve().parent.parent)
MAX_REPORT_BYTES = 256 << 20
MAX_VERDICT_BYTES = 1 << 16


def _child_verdict(path: Path) -> tuple[bool, str]:
    try:
        if path.stat().st_size > MAX_VERDICT_BYTES:
            return False, "the profiled child wrote an oversized verdict"
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False, "the profiled child wrote no verdict"
    if not isinstance(data, dict):
        return False, "the profiled child wrote a malformed verdict"
    message = " ".join(str(data.get("message", "")).split())[:300]
    return bool(data.get("passed")), f"{message} (reported by the profiled child: untrusted; correctness was judged by the isolated tests)"


def profile_isolated(ev: Any, submission: Path, out_dir: Path | None) -> tuple[list[ProfileRow], list[Path]]:
    """One ncu report per benchmark case; reports over MAX_REPORT_BYTES are dropped."""
    from swizzlelab.harness.ncu import NAMED_METRIC_IDS, run_ncu

    target = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix=f"swizzlelab-ncu-{os.getpid()}-"))
    target.mkdir(parents=True, exist_ok=True)
    config = {"limits": ev.limits.to_dict(), "drop_to": ev.drop_to}
    rows: list[ProfileRow] = []
    files: list[Path] = []
    task = ev.task
    for index, case in enumerate(task.cases("benchmarks")):
        report = target / f"{task.name}-profile-case{index}.ncu-rep"
        result = ev.workdir / f"profile-{index}.json"
        cmd = [sys.executable, "-I", "-c", PROFILE_BOOT, SRC_ROOT, json.dumps(config), "--task", str(task.path),
               "--case", json.dumps(case), "--result", str(result), "--submission", str(submission)]
        if ev.order_spec:
            cmd += ["--order", ev.order_spec]
        try:
            kernels = run_ncu(cmd, list(NAMED_METRIC_IDS), profile_from_start=False, report_path=report,
                              timeout_s=ev.limits.run_s, env=ev.child.env(),
                              wrapper=[sys.executable, "-I", "-c", NAMESPACE_EXEC, SRC_ROOT])
        except UserError as err:
            rows.append(ProfileRow(case=dict(case), kernels=[], report_path="", check_message=str(err),
                                   check_passed=False, order=ev.order_info(case)))
            ev.note(task.case_label(case))
            continue
        passed, message = _child_verdict(result)
        if report.is_file() and report.stat().st_size > MAX_REPORT_BYTES:
            report.unlink()
            message += f"; the .ncu-rep was over {MAX_REPORT_BYTES >> 20} MiB and was dropped"
        elif report.is_file():
            files.append(report)
        rows.append(ProfileRow(case=dict(case), kernels=kernels, report_path=str(report) if report.is_file() else "",
                               check_message=message, check_passed=passed, order=ev.order_info(case)))
        ev.verdicts.append({"case": dict(case), "kind": "profile", "passed": passed,
                            "reason": None if passed else message, "kernels": len(kernels)})
        ev.note(task.case_label(case))
    return rows, files
