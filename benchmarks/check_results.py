"""Checks of the committed results under benchmarks/ (data, not code): each study's JSON still says what its
claims rest on. Run: python benchmarks/check_results.py   (exit 1 and one line per failed check)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def optimize_h100() -> list[str]:
    """The H100 optimize study: measured rows on an H100, iteration logs that match, a gain outside noise."""
    problems = []
    report = json.loads((ROOT / "optimize_h100" / "optimize_h100.json").read_text())
    if not report["device"].startswith("NVIDIA H100"):
        problems.append(f"device is {report['device']!r}, not an H100")
    if set(report["tasks"]) != {"matmul", "transpose", "spmv", "lean_attention"}:
        problems.append(f"tasks are {sorted(report['tasks'])}")
    row_major, grouped8, best = (report[f"{k}_dram_read_bytes"] for k in ("row_major", "grouped8", "best"))
    if not (best <= grouped8 and row_major / best >= 3.0):
        problems.append(f"matmul DRAM reads row-major {row_major}, grouped-8 {grouped8}, best {best}")
    for name, task in report["tasks"].items():
        for key in ("default", "best"):
            row = task["rows"][key]
            if not (row["time_ms"] and row["time_ms"] > 0 and row["measured"].startswith("measured (NVIDIA H100")):
                problems.append(f"{name} {key}: not a measured H100 time")
            if row["l2_hit_rate_pct"] is None or not row["dram_read_bytes"]:
                problems.append(f"{name} {key}: no ncu figures")
        if (task["rows"]["grouped8"] is None) != (task["grouped8_note"] is not None):
            problems.append(f"{name}: grouped-8 row and note disagree")
        records = (ROOT / "optimize_h100" / name / "iterations.jsonl").read_text().splitlines()
        iterations = [r for r in map(json.loads, records) if r["type"] == "iteration"]
        if len(iterations) != task["iterations"] + 1:  # the baseline is iteration 0
            problems.append(f"{name}: {len(iterations)} iteration records for {task['iterations']} iterations")
        if not all(r["permutation_id"] for r in iterations):
            problems.append(f"{name}: an iteration without a permutation id")
        if (ROOT / "optimize_h100" / name / "best_kernel.py").exists():
            problems.append(f"{name}: a generated best_kernel.py in the tree (keep it as best_kernel.py.txt)")
    gains = [t["rows"]["best"]["speedup_ci95"] for t in report["tasks"].values() if t["rows"]["best"]["speedup_ci95"]]
    if not any(low > 1.0 for low, _ in gains):
        problems.append("no task has a measured gain outside noise")
    return problems


def wild_h100() -> list[str]:
    """The wild-kernel study: the unmodified tutorial-style matmul, own order vs best found, measured on an H100
    with a CI and ncu figures, the best order's output identical to the own order's."""
    problems = []
    report = json.loads((ROOT / "wild_h100" / "wild_h100.json").read_text())
    if not report["device"].startswith("NVIDIA H100"):
        problems.append(f"device is {report['device']!r}, not an H100")
    if "unmodified" not in report["kernel_file"] or not report["command_predict"] or not report["command_measure"]:
        problems.append("the kernel file is not said to be unmodified, or a command is missing")
    for key in ("own_order", "best_found"):
        row = report[key]
        if not (row["measured_ms"] > 0 and row["measured_ncu"].get("l2_hit_rate_pct") and row["measured_ncu"].get("dram_read_bytes")):
            problems.append(f"{key}: no measured time or ncu figures")
        if not row["predicted"].get("model"):
            problems.append(f"{key}: no prediction")
    low, high = report["speedup"]["ci95"]
    if not (low <= report["speedup"]["value"] <= high) or not report["speedup"]["kind"].startswith("measured (NVIDIA H100"):
        problems.append("speedup CI does not hold the speedup, or it is not an H100 measurement")
    if not report["output_identical_to_own_order"]:
        problems.append("the best order's output differs from the kernel's own")
    records = [json.loads(line) for line in (ROOT / "wild_h100" / "opt" / "iterations.jsonl").read_text().splitlines()]
    if report["best_found"]["iteration"] not in {r.get("iteration") for r in records if r.get("type") == "iteration"}:
        problems.append("the best order is not an iteration of the committed optimize log")
    return problems


def trace_derive() -> list[str]:
    """Derived traces of the wild kernels (trace_derive/trace_derive_cpu.json): every case derived, equal array for
    array to interpreting every program wherever both ran; the 8192^3 tutorial matmul in <= 10 CPU seconds and
    >= 100x fewer than the interpretation's estimate; estimates within 25% of the full runs they stand for."""
    problems = []
    report = json.loads((ROOT / "trace_derive" / "trace_derive_cpu.json").read_text())
    for row in report["results"]:
        label = row.get("label", "?")
        if "error" in row or not row.get("derived"):
            problems.append(f"{label}: not derived ({row.get('error') or row.get('how')})")
        elif row["interpreted_kind"].startswith("measured") and row.get("equal") is not True:
            problems.append(f"{label}: derived and interpreted traces differ")
        estimate = row.get("interpreted_estimate_seconds")
        if estimate is not None and abs(estimate / row["interpreted_seconds"] - 1) > 0.25:
            problems.append(f"{label}: estimate {estimate} s for a measured {row['interpreted_seconds']} s")
    big = [r for r in report["results"] if r.get("label", "").startswith("tutorial_matmul 8192^3")]
    if not big or not (big[0].get("derived_seconds", 99) <= 10 and big[0].get("speedup", 0) >= 100):
        problems.append("tutorial_matmul 8192^3: not derived in <= 10 s at >= 100x")
    return problems


def every_study_names_its_device_and_command() -> list[str]:
    """Each study folder has a run script, and each of its JSON results says device and command."""
    problems = []
    for folder in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        if not any((folder / name).is_file() for name in ("run.py", "run.sh")):
            problems.append(f"{folder.name}: no run.py / run.sh")
        for path in sorted(folder.glob("*.json")):
            record = json.loads(path.read_text())
            if isinstance(record, dict) and not {"device", "system", "measured_device"} & set(record):
                problems.append(f"{path.relative_to(ROOT)}: no device")
    return problems


def number(value: object) -> bool:
    """A real number (bool is not one), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def validation_row_problems(row: dict) -> list[str]:
    """The row schema issue 15 names for the validation JSON: task/order/device strings, case a dict, set fit or
    held_out, hit rates in [0, 100] pp and DRAM read bytes >= 0."""
    problems = []
    for key in ("task", "order", "device"):
        if not (isinstance(row.get(key), str) and row[key]):
            problems.append(f"{key} is {row.get(key)!r}, not a non-empty string")
    if not (isinstance(row.get("case"), dict) and row["case"]):
        problems.append(f"case is {row.get('case')!r}, not a non-empty object")
    if row.get("set") not in ("fit", "held_out"):
        problems.append(f"set is {row.get('set')!r}, not fit / held_out")
    for key in ("predicted_l2_hit_pct", "measured_l2_hit_pct"):
        if not (number(row.get(key)) and 0.0 <= row[key] <= 100.0):
            problems.append(f"{key} is {row.get(key)!r}, not a percentage")
    for key in ("predicted_dram_read_bytes", "measured_dram_read_bytes"):
        if not (number(row.get(key)) and row[key] >= 0):
            problems.append(f"{key} is {row.get(key)!r}, not a byte count")
    return problems


def sim_validation() -> list[str]:
    """The simulator's validation set (issue 15): >= 40 rows per GPU on an H100 and an H200, each with the fields
    the issue names, orders that differ within each case, held-out rows reported apart from the fit rows."""
    problems = []
    report = json.loads((ROOT / "sim_validation" / "sim_validation.json").read_text())
    problems += [f"row {i}: {p}" for i, r in enumerate(report["rows"]) for p in validation_row_problems(r)][:10]
    rows = [r for r in report["rows"] if not validation_row_problems(r)]  # the checks below read the schema's fields
    for gpu in ("H100", "H200"):
        mine = [r for r in rows if gpu in r["device"]]
        if len(mine) < 40:
            problems.append(f"{len(mine)} well-formed rows on the {gpu}, fewer than 40")
        cases: dict[str, list[float]] = {}
        for r in mine:
            cases.setdefault(r["task"] + json.dumps(r["case"], sort_keys=True), []).append(r["measured_l2_hit_pct"])
        flat = [key for key, hits in cases.items() if max(hits) - min(hits) < 2.0]
        if flat:
            problems.append(f"{gpu}: cases whose orders all measure within 2 pp: {flat}")
    if {r["set"] for r in rows} != {"fit", "held_out"}:
        problems.append("the sets are not fit / held_out")
    if not all(r.get("output_correct") for r in report["rows"]):
        problems.append("a measured kernel's output was wrong")
    if "held_out" not in report or report["held_out"]["all"]["rows"] < 40:
        problems.append("no held-out summary of at least 40 rows")
    return problems


def sim_speed() -> list[str]:
    """Issue 15's speed targets as the committed runs measured them: one CI core >= 30 M accesses/s, the GPU host's
    CPU >= 100 M/s, the GPU engine's default batch >= 1 G/s with its results equal to the CPU engine's, the search
    >= 200 candidates a minute on either engine, overshooting its budget by at most its longest candidate."""
    problems = []
    cpu = json.loads((ROOT / "sim_speed" / "sim_speed_cpu.json").read_text())["stages"]
    host = json.loads((ROOT / "sim_speed" / "sim_speed_gpuhost_h100.json").read_text())
    if "H100" not in (host.get("gpu") or ""):
        problems.append(f"the GPU host run names no H100: {host.get('gpu')!r}")
    host = host["stages"]
    one = [r for r in cpu["one_core"] if r["target"] == "H100-SXM"]
    if not one or one[0]["accesses_per_s"] < 30e6:
        problems.append(f"one CI core: {one and one[0]['accesses_per_s']} accesses/s, under 30 M")
    cores = [r for r in host["all_cores"] if r["target"] == "H100-SXM"]
    if not cores or cores[0]["accesses_per_s"] < 100e6:
        problems.append(f"GPU host CPU: {cores and cores[0]['accesses_per_s']} accesses/s, under 100 M")
    batch = [r for r in host["gpu_batch"] if r["default_concurrency"]]
    if not batch or batch[0]["accesses_per_s"] < 1e9:
        problems.append(f"GPU engine batch: {batch and batch[0]['accesses_per_s']} accesses/s, under 1 G")
    if not all(all(r["equal_to_cpu_engine"].values()) for r in host["gpu_batch"]) or \
            not all(r["equal_to_cpu_engine"] for r in host["gpu"]):
        problems.append("a GPU result differs from the CPU engine's")
    # The search as optimize runs it on the GPU host (--sim-engine auto: the GPU), and with the CPU engine on the same
    # host in the same call.
    for name, engine in (("search_gpu", "gpu"), ("search_cpu", "auto")):
        run = json.loads((ROOT / "sim_speed" / f"sim_speed_gpuhost_h100_{name}.json").read_text())
        search = run["stages"]["search"]
        if "H100" not in (run.get("gpu") or "") or search["engine"] != engine:
            problems.append(f"{name}: engine {search['engine']} on {run.get('gpu')!r}, not {engine} on an H100 host")
        if search["candidates_per_min"] < 200 or search["overshoot_s"] > search["longest_candidate_s"]:
            problems.append(f"{name}: {search['candidates_per_min']:.0f}/min, overshoot {search['overshoot_s']:.2f} s "
                            f"against the longest candidate's {search['longest_candidate_s']:.2f} s")
    return problems


def evaluator_h100() -> list[str]:
    """Issue 11's measured claims: every exploit rejected or given its honest time, none fooled; an isolated
    honest kernel within 2% of the in-process (--trusted) mean of the same run, on every case."""
    problems = []
    exploits = json.loads((ROOT / "exploits_h100" / "exploits_h100.json").read_text())
    bad = [r for r in exploits["rows"] if r["kind"] == "exploit"]
    if len(bad) < 20:
        problems.append(f"only {len(bad)} exploit rows")
    for r in bad:
        if r["verdict"] not in ("rejected", "honest_time") or r["fooled"] or not r["as_expected"]:
            problems.append(f"exploit {r['name']}: verdict {r['verdict']}, fooled {r['fooled']}")
        if r["verdict"] == "rejected" and not r["reason"]:
            problems.append(f"exploit {r['name']}: rejected without a reason")
    if exploits["summary"]["fooled"] != 0:
        problems.append("an exploit fooled the evaluator")
    overhead = json.loads((ROOT / "eval_overhead_h100" / "eval_overhead_shared_loop.json").read_text())
    tasks = {c["task"] for c in overhead["cases"]}
    if not {"histogram", "matmul"} <= tasks:
        problems.append(f"overhead study covers {sorted(tasks)}, not histogram and matmul")
    for c in overhead["cases"]:
        if not c.get("within_2pct") or abs(c["mean_ms"]["C"] / c["mean_ms"]["T"] - 1) > 0.02:
            problems.append(f"overhead {c['task']} {c['case']}: isolated vs --trusted {c.get('isolated_vs_trusted')}")
    return problems


def optimize_matmul_orders() -> list[str]:
    """Issue 15's order study on matmul 8192^3: measured on the H100, its best order's DRAM reads and the
    grouped-8 reference come from its rows, and the target verdict matches the numbers."""
    problems = []
    report = json.loads((ROOT / "optimize_matmul_h100" / "optimize_matmul_orders_h100.json").read_text())
    if "H100" not in report.get("device", "") or not report.get("script"):
        problems.append("optimize_matmul_orders_h100.json: no H100 device or script")
    if not (report.get("command") or report.get("commands")):
        problems.append("optimize_matmul_orders_h100.json: no command")
    means = {o["order"]: o.get("mean_dram_read_bytes") for o in report.get("orders", [])}
    if means.get(report.get("best_order")) != report.get("best_dram_read_bytes"):
        problems.append("optimize_matmul_orders_h100.json: best_dram_read_bytes is not the measured mean of best_order")
    best, target = report["best_dram_read_bytes"], report["target_dram_read_bytes"]
    if not 0 < best <= report["base_dram_read_bytes"] or report["target_met"] != (best <= target):
        problems.append(f"optimize_matmul_orders_h100.json: best {best}, base {report['base_dram_read_bytes']}, "
                        f"target_met {report['target_met']} vs target {target}")
    return problems


def kdir_prediction() -> list[str]:
    """The simulator's K-direction rows (matmul_kdir_h100/matmul_kdir_sim.json): every measured row of the two
    ncu studies is predicted, and the summary's error is the one its rows give."""
    problems = []
    folder = ROOT / "matmul_kdir_h100"
    doc = json.loads((folder / "matmul_kdir_sim.json").read_text())
    measured = sum(1 for name in ("matmul_kdir_h100.json", "matmul_kdir_sweep_h100.json")
                   for row in json.loads((folder / name).read_text())["rows"] if row.get("output_ok"))
    rows = doc["rows"]
    if len(rows) != measured or not all(number(r.get("predicted_dram_read_bytes")) and
                                        number(r.get("measured_dram_read_bytes")) for r in rows):
        problems.append(f"matmul_kdir_sim.json: {len(rows)} rows for {measured} measured, or a value missing")
    elif rows:
        err = sum(abs(r["predicted_dram_read_bytes"] / r["measured_dram_read_bytes"] - 1) for r in rows) / len(rows)
        if abs(err - doc["summary"]["dram_read_mean_abs_rel_error"]) > 1e-9:
            problems.append(f"matmul_kdir_sim.json: summary error {doc['summary']['dram_read_mean_abs_rel_error']} "
                            f"but the rows give {err}")
    return problems


def kalt_optimize() -> list[str]:
    """The optimizer with --k-dir alternate, and with --wave-sync too (matmul_kdir_h100/optimize_matmul_kalt_h100.json,
    optimize_matmul_sync_h100.json): its best is the fewest measured reads of the GPU run's alternating rows, its
    verdict matches the target, its rows are the GPU run's, and its speedup is one of that run's timings."""
    problems = []
    folder = ROOT / "matmul_kdir_h100"
    for summary, measured_name in (("optimize_matmul_kalt_h100.json", "matmul_kalt_opt_h100.json"),
                                   ("optimize_matmul_sync_h100.json", "matmul_sync_opt_h100.json")):
        doc = json.loads((folder / summary).read_text())
        run = json.loads((folder / measured_name).read_text())
        measured = [r["metrics"]["dram__bytes_read.sum"] for r in run["rows"] if r["wave"] and r["output_ok"]]
        if not measured or doc["best_dram_read_bytes"] != min(measured):
            problems.append(f"{summary}: best_dram_read_bytes {doc['best_dram_read_bytes']} is not the fewest "
                            f"measured {measured}")
        if doc["target_met"] != (doc["best_dram_read_bytes"] <= doc["target_dram_read_bytes"]):
            problems.append(f"{summary}: target_met disagrees with best_dram_read_bytes")
        if doc["measure_command"] != run["command"] or doc["device"] != run["device"]:
            problems.append(f"{summary}: the summary names another run than {measured_name}")
        if not any(abs(t["speedup"] - doc["speedup_vs_grouped8"]) < 1e-12 for t in run["timings"]):
            problems.append(f"{summary}: speedup_vs_grouped8 is none of {measured_name}'s timings")
    return problems


def placement_probe() -> list[str]:
    """The placement probe of the missed pairs (issue 15): one file per GPU, every output right, every pair of every
    case analysed, and none placement-bound, as the sim_validation README says."""
    problems = []
    for gpu, device in (("h100", "NVIDIA H100"), ("h200", "NVIDIA H200")):
        doc = json.loads((ROOT / "sim_validation" / f"placement_probe_{gpu}.json").read_text())
        if not doc["device"].startswith(device) or doc["failures"]:
            problems.append(f"{gpu}: device {doc['device']!r}, failures {doc['failures']}")
        if not doc["rows"] or not all(r["output_correct"] for r in doc["rows"]):
            problems.append(f"{gpu}: no rows or a wrong output")
        placements = {r["placement"] for r in doc["rows"]}
        if len(placements) < 6:
            problems.append(f"{gpu}: {len(placements)} placements measured, fewer than the registered 6")
        pairs = {a["case"] + " " + " - ".join(a["orders"]) for a in doc.get("analysis", {}).values()}
        by_case: dict[str, list[str]] = {}
        for r in doc["rows"]:
            by_case.setdefault("{m}x{n}x{k}".format(**r["case"]), []).append(r["order"])
        for case, orders in ((c, list(dict.fromkeys(o))) for c, o in by_case.items()):
            missing = [f"{case} {a} - {b}" for i, a in enumerate(orders) for b in orders[i + 1:]
                       if f"{case} {a} - {b}" not in pairs]
            if missing:
                problems.append(f"{gpu}: pairs not analysed: {missing}")
        bound = [name for name, a in doc.get("analysis", {}).items() if a["placement_bound"]]
        if bound:
            problems.append(f"{gpu}: placement-bound pairs {bound}, where the README says none")
    return problems


def right_rows(path: Path, gpu: str, count: int) -> bool:
    """Whether a run.py rows file holds `count` rows measured on a GPU named `gpu`..., every output right."""
    measured = json.loads(path.read_text())
    return measured["device"].startswith(gpu) and not measured["failures"] and len(measured["rows"]) == count \
        and all(r["output_correct"] for r in measured["rows"])


def follows_rule(test: dict) -> bool:
    """Whether a page_test.py verdict follows its numbers: the term is adopted iff it has fewer tau misses, or as
    many and a lower targets loss, and stays within 3 pp and 10% on the set."""
    on, off = test["on"]["test_set"], test["off"]["test_set"]
    wins = (on["tau_misses"], on["targets_loss"]) < (off["tau_misses"], off["targets_loss"])
    return test["adopted"] == (wins and on["mae_l2_hit_pp"] <= 3.0 and on["mean_rel_error_dram_read"] <= 0.1)


def page_noise() -> list[str]:
    """The models' page noise (issue 15, stop 38): the page set measured on an H200 and an H100 with every output
    right, rules 2 and 3's verdicts (H200 adopts, H100 does not) following their own numbers, and the table predicted
    with page noise on the H200's rows alone."""
    problems = []
    folder = ROOT / "sim_validation" / "page"
    for sub, gpu in (("h200/sim_ncu_rows_nvidia_h200.json", "NVIDIA H200"),
                     ("h100/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100")):
        if not right_rows(folder / sub, gpu, 72):
            problems.append(f"page set: not 72 right rows measured on an {gpu}")
    for name, gpu, adopted in (("page_test.json", "NVIDIA H200", True), ("page_test_h100.json", "NVIDIA H100", False)):
        test = json.loads((folder / name).read_text())
        if not follows_rule(test) or test["adopted"] != adopted or len(test["measured_device"]) != 1 \
                or not test["measured_device"][0].startswith(gpu):
            problems.append(f"{name}: adopted {test['adopted']} does not follow its numbers, or not the README's verdict")
    table = json.loads((ROOT / "sim_validation" / "sim_validation.json").read_text())
    if table.get("fitted_page_noise") != "model":
        problems.append(f"sim_validation.json: fitted_page_noise {table.get('fitted_page_noise')!r}, not 'model'")
    for row in table["rows"]:
        if ("page_noise 0.9" in row["predicted_by"]) != row["device"].startswith("NVIDIA H200"):
            problems.append(f"sim_validation.json: {row['device']} row predicted with the wrong page noise")
            break
    return problems


def program_pace() -> list[str]:
    """The program-pace test (issue 15, stop 39): the pace set measured on an H100 (two calls) and an H200 with every
    output right, rule 4's verdict (not adopted) following its own numbers, and the table without program pace."""
    problems = []
    folder = ROOT / "sim_validation" / "pace"
    for sub, gpu in (("h100/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100"),
                     ("h100_b/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100"),
                     ("h200/sim_ncu_rows_nvidia_h200.json", "NVIDIA H200")):
        if not right_rows(folder / sub, gpu, 78):
            problems.append(f"pace set: {sub} is not 78 right rows measured on an {gpu}")
    test = json.loads((folder / "pace_test.json").read_text())
    if test["set"] != "pace" or not follows_rule(test) or test["adopted"] \
            or sorted(test["measured_device"]) != ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]:
        problems.append("pace_test.json: adopted does not follow its numbers, or not the README's verdict (not adopted)")
    table = json.loads((ROOT / "sim_validation" / "sim_validation.json").read_text())
    if table.get("fitted_program_cv") != 0.0:
        problems.append(f"sim_validation.json: fitted_program_cv {table.get('fitted_program_cv')!r}, not 0")
    return problems


def ncu_replicate() -> list[str]:
    """Rule 5 (issue 15, stop 40): one fresh ncu run of every table row on an H100 and an H200, every output right;
    the verdict follows its counts and is the README's (ncu's own means rank the fresh run better than the model);
    and the table holds the fresh runs."""
    problems = []
    folder = ROOT / "sim_validation" / "replicate"
    for gpu, tag in (("NVIDIA H100", "nvidia_h100_80gb_hbm3"), ("NVIDIA H200", "nvidia_h200")):
        for name, count in (("table", 45), ("fresh", 31), ("page", 24), ("pace", 26)):
            path = folder / gpu.split()[1].lower() / name / f"sim_ncu_rows_{tag}.json"
            if not right_rows(path, gpu, count):
                problems.append(f"{path.relative_to(ROOT)}: not {count} right rows measured on an {gpu}")
    test = json.loads((folder / "replicate_test.json").read_text())
    held = test["cases_below_tau_target"]["held_out"]
    follows = (held["n_model"] <= held["n_ncu"]) == test["verdict"].startswith("the model ranks")
    if not follows or test["verdict"] != "ncu ranks orders more reproducibly than the model" or test["left_out"] \
            or held["scored_cases"] != 54:
        problems.append("replicate_test.json: the verdict does not follow its counts, or is not the README's")
    table = json.loads((ROOT / "sim_validation" / "sim_validation.json").read_text())
    if "benchmarks/sim_validation/replicate/h200/pace/sim_ncu_rows_nvidia_h200.json" not in table["command"]:
        problems.append("sim_validation.json: the fresh runs of rule 5 are not in the table")
    return problems


DEEP_H100 = {"fresh0": 15, "fresh1": 12, "pace3": 36, "pace4": 36, "pace5": 4}
DEEP_H200 = {"0": 55, "1": 15, "2": 16, "3": 20}


def case_name(row: dict) -> str:
    """A row's case as validate.case_key names it (not imported: these checks read JSON alone, without numba)."""
    return " ".join([row["task"]] + [f"{k}={v}" for k, v in row["case"].items() if k != "seed"])


def table_runs(rows: list[dict], less: dict[str, int] | None = None) -> dict[str, set[int]]:
    """Runs a row of each table case ("part | device | case", as ncu_reproducibility names it), less the runs
    `less` counts per "device | case | order"."""
    runs: dict[str, set[int]] = {}
    for r in rows:
        case = case_name(r)
        n = len(r["measured_dram_read_bytes_runs"]) - (less or {}).get(f"{r['device']} | {case} | {r['order']}", 0)
        runs.setdefault(f"{r['set']} | {r['device']} | {case}", set()).add(n)
    return runs


def floor_problems(name: str, floor: dict, runs: dict[str, set[int]]) -> list[str]:
    problems = []
    if {k: set(v["runs"]) for k, v in floor["today"]["cases"].items()} != runs:
        problems.append(f"{name}: not drawn on the table it names (cases or runs a row differ)")
    p_today = floor["today"]["groups"]["held_out"]["perfect_p_all"]
    needed = next((d for d in floor["deeper"] if d["held_out_perfect_p_all"] >= floor["p_all_target"]), None)
    if p_today >= floor["p_all_target"]:
        expected = "open"
    elif needed is not None and needed["device_s_missing_total"] <= floor["session_ncu_s"]:
        expected = "measure"
    else:
        expected = "blocked"
    if not floor["decision"].startswith(expected) or floor["today"]["draws"] != 4000:
        problems.append(f"{name}: the decision is not the rule's ({expected}) or not 4000 draws")
    return problems


def ncu_floor() -> list[str]:
    """Rules 6 and 7 (issue 15, stop 41): rule 7's deeper runs are right and in the table (the H200's rebuilt from
    its call's log, which matches run.py's rows wherever both exist); rule 6's floor was drawn on the table before
    them (`ncu_floor.json`) and again after (`ncu_floor_deep.json`), each decision as the rule fixed it."""
    problems = []
    folder = ROOT / "sim_validation"
    table = json.loads((folder / "sim_validation.json").read_text())
    deep_runs: dict[str, int] = {}
    files = [(folder / "deep" / "h100" / k / "sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100", n)
             for k, n in DEEP_H100.items()]
    files += [(folder / "deep" / "h200" / k / "sim_ncu_rows_nvidia_h200.json", "NVIDIA H200", n)
              for k, n in DEEP_H200.items()]
    for path, gpu, count in files:
        doc = json.loads(path.read_text())
        if gpu == "NVIDIA H100":  # rows as run.py wrote them, every output checked
            ok = right_rows(path, gpu, count) and not doc.get("rebuilt_from_log")
        else:  # rebuilt from the log: no output check recorded, the call's failures none
            ok = doc.get("rebuilt_from_log") is True and doc["device"].startswith(gpu) and not doc["failures"] \
                and len(doc["rows"]) == count
        if not ok:
            problems.append(f"{path.relative_to(ROOT)}: not {count} rows of an {gpu} as rule 7 measured them")
        if str(path.relative_to(ROOT.parent)) not in table["command"]:
            problems.append(f"{path.relative_to(ROOT)}: not in sim_validation.json's command")
        for r in doc["rows"]:
            key = f"{r['device']} | {case_name(r)} | {r['order']}"
            deep_runs[key] = deep_runs.get(key, 0) + 1
    before = json.loads((folder / "ncu_floor.json").read_text())
    after = json.loads((folder / "ncu_floor_deep.json").read_text())
    problems += floor_problems("ncu_floor.json", before, table_runs(table["rows"], deep_runs))
    problems += floor_problems("ncu_floor_deep.json", after, table_runs(table["rows"]))
    return problems


CHECKS: tuple[Callable[[], list[str]], ...] = (optimize_h100, wild_h100, sim_validation, sim_speed, evaluator_h100,
                                               optimize_matmul_orders, kdir_prediction, kalt_optimize,
                                               placement_probe, page_noise, program_pace, ncu_replicate, ncu_floor,
                                               trace_derive, every_study_names_its_device_and_command)


def main() -> int:
    failed = [f"{check.__name__}: {problem}" for check in CHECKS for problem in check()]
    for line in failed:
        print(line)
    print(f"{len(CHECKS)} checks, {len(failed)} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
