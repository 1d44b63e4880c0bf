"""Checks of the committed results under benchmarks/ (data, not code): each study's summary still says what its claims
rest on; where a study's raw data is present, it hashes to the manifest and summarizes to the committed summary.
Run: python benchmarks/check_results.py   (exit 1 and one line per failed check; no raw data needed)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from scipy.stats import spearmanr

try:
    from . import archive  # imported as benchmarks.check_results
except ImportError:
    import archive  # run as python benchmarks/check_results.py: its folder is on sys.path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent  # the checkout: the files studies name (tests/wild/...) are read here, wherever ROOT points
README_MAX_LINES = 300


def summary(study: str) -> dict:
    """A study's committed summary.json (built from its raw data by its summary.py)."""
    return json.loads((ROOT / study / archive.SUMMARY).read_text())


def trace_derive() -> list[str]:
    """Traces of the wild kernels (trace_derive/trace_derive_cpu.json): every kernel file of tests/wild has a small
    row where the derived trace (or, for a kernel whose addresses depend on its data, the fallback with its
    reason) equals, array for array, the trace of every program interpreted; every row derived or saying why
    not; the 8192^3 tutorial matmul in <= 10 CPU seconds and >= 100x fewer than the interpretation's estimate;
    estimates within 25% of the full runs they stand for."""
    problems = []
    report = json.loads((ROOT / "trace_derive" / "trace_derive_cpu.json").read_text())
    for row in report["results"]:
        label = row.get("label", "?")
        if "error" in row or not (row.get("derived") or row.get("fallback_reason")):
            problems.append(f"{label}: neither derived nor a reason why not ({row.get('error') or row.get('how')})")
        elif row["interpreted_kind"].startswith("measured") and row.get("equal") is not True:
            problems.append(f"{label}: derived and interpreted traces differ")
        estimate = row.get("interpreted_estimate_seconds")
        if estimate is not None and abs(estimate / row["interpreted_seconds"] - 1) > 0.25:
            problems.append(f"{label}: estimate {estimate} s for a measured {row['interpreted_seconds']} s")
    wild = ROOT.parent / "tests" / "wild"
    kernels = {p.name for p in wild.glob("*.py") if "@triton.jit" in p.read_text()}
    checked = {Path(r["file"].split(":")[0]).name for r in report["results"]
               if r.get("mode") == "small" and r.get("equal") is True}
    for name in sorted(kernels - checked):
        problems.append(f"tests/wild/{name}: no small row with derived (or fallback) == interpreted")
    big = [r for r in report["results"] if r.get("label", "").startswith("tutorial_matmul 8192^3")]
    if not big or not (big[0].get("derived_seconds", 99) <= 10 and big[0].get("speedup", 0) >= 100):
        problems.append("tutorial_matmul 8192^3: not derived in <= 10 s at >= 100x")
    return problems


def number(value: object) -> bool:
    """A real number (bool is not one), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def llm_proposer() -> list[str]:
    """The LLM-in-the-loop study (issue 58, llm_proposer/llm_proposer_cpu.json): a real model named with its size;
    the four tasks on the MI300X, each under llm, both and search at one budget; every LLM call accounted for
    (no reply, no formula, unparsable, not a bijection, duplicate or a new order, and these add up); the best
    predicted order never worse than the kernel's own; whether the LLM found an order outside the search's families
    stated per row; and the README's table made from this file."""
    path = ROOT / "llm_proposer" / "llm_proposer_cpu.json"
    report = json.loads(path.read_text())
    problems = []
    model = report["model"]
    if not (model["name"] and number(model["size_bytes"]) and model["size_bytes"] > 10**8):
        problems.append(f"model not named with its size: {model}")
    rows = report["rows"]
    combos = {(r["task"], r["target"], r["proposer"]) for r in rows}
    for task in ("transpose", "matmul", "lean_attention", "spmv"):
        for proposer in ("llm", "both", "search"):
            if (task, "mi300x", proposer) not in combos:
                problems.append(f"no {task} mi300x {proposer} row")
    budgets = {r["iterations"] for r in rows if r["proposer"] != "search"}
    if budgets - {report["budget"]}:
        problems.append(f"llm/both rows ran {sorted(budgets)} iterations, not the budget {report['budget']}")
    for r in rows:
        name = f"{r['task']} {r['target']} {r['proposer']}"
        if r["best"]["dram_read_bytes"] > r["baseline"]["dram_read_bytes"] or not r["best"]["kind"].startswith("predicted"):
            problems.append(f"{name}: best predicted order reads more than the kernel's own, or is unlabelled")
        if not isinstance(r["llm_orders_outside_families"], list) or r["family_orders"] < 1:
            problems.append(f"{name}: no family comparison")
        llm = r["llm"]
        if r["proposer"] == "search":
            if llm is not None or r["by_proposer"]["llm"]:
                problems.append(f"{name}: LLM iterations in a search row")
            continue
        if llm["calls"] != r["by_proposer"]["llm"] or llm["calls"] != llm["no_reply"] + llm["replies"]:
            problems.append(f"{name}: {llm['calls']} calls, {r['by_proposer']['llm']} llm iterations, "
                            f"{llm['no_reply']} without and {llm['replies']} with a reply")
        if llm["replies"] != llm["no_formula"] + llm["unparsable"] + llm["parsed"]:
            problems.append(f"{name}: replies do not add up to no formula + unparsable + parsed")
        if llm["parsed"] != llm["not_bijective"] + llm["bijections"] or \
                llm["bijections"] != llm["duplicates"] + llm["distinct_new"]:
            problems.append(f"{name}: parsed formulas do not add up to bijections and the rest")
        if len(llm["reasons"]) != llm["replies"] - llm["distinct_new"]:
            problems.append(f"{name}: a reply that was not evaluated has no reason")
    readme = (ROOT / "llm_proposer" / "README.md").read_text()
    if model["name"] not in readme:
        problems.append("README does not name the model")
    return problems


def runs_of(study: str, name: str) -> dict:
    return json.loads((ROOT / study / name).read_text())


def wild_gpu() -> list[str]:
    """Published kernel files optimized as typed (wild_gpu/*.json): every command `swizzlelab optimize --kernel
    tests/wild/FILE` of unedited files that exist, rc 0 on the H200 (tutorials); a best order is reported only with a
    measured CI on that file's GPU that holds its speedup; no slower order is kept."""
    problems = []
    for slug, gpu, runs in (("h200", "NVIDIA H200", {"t03", "t09", "t06"}), ("h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", None)):
        doc = runs_of("wild_gpu", f"wild_gpu_nvidia-{slug}.json")
        if doc["device"] != gpu or (runs and set(doc["runs"]) != runs):
            problems.append(f"wild_gpu: device {doc['device']!r}, runs {sorted(doc['runs'])}")
        for name, run in doc["runs"].items():
            file = run["command"].split("--kernel ")[1].split()[0].split(":")[0]
            if not run["command"].startswith("swizzlelab optimize") or not (REPO / file).is_file() or (runs and run["rc"]):
                problems.append(f"wild_gpu {name}: command {run['command'][:60]!r}, rc {run['rc']}")
            best = run.get("best_speedup")
            if best and not (best["kind"] == f"measured ({gpu})" and 1.0 < best["ci95"][0] <= best["value"]
                             <= best["ci95"][1]):
                problems.append(f"wild_gpu {name}: best speedup {best} is not a measured gain on the {gpu}")
    return problems


def time_model() -> list[str]:
    """The time model's table (time_model/time_model_h100.json): 87 rows measured on one H100; the held-out Spearman
    and sign figures are the rows' own; and they miss the issue's targets, as the README says."""
    doc = runs_of("time_model", "time_model_h100.json")
    rows = doc["rows"]
    held = [r for r in rows if r["set"] == "held_out"]
    said = doc["summary"]["held_out"]
    rho = float(spearmanr([r["predicted_speedup"] for r in held], [r["measured_speedup"] for r in held]).statistic)
    sign = sum(r["sign_right_or_both_noise"] for r in held) / len(held)
    problems = []
    if len(rows) != 87 or {r["device"] for r in rows} != {"NVIDIA H100 80GB HBM3"}:
        problems.append(f"time_model: {len(rows)} rows on {sorted({r['device'] for r in rows})}")
    if abs(rho - said["spearman"]) > 1e-9 or abs(sign - said["sign_right_or_both_noise"]) > 1e-9:
        problems.append(f"time_model: held-out Spearman {rho:.4f}, sign {sign:.3f} from the rows; summary says "
                        f"{said['spearman']:.4f}, {said['sign_right_or_both_noise']:.3f}")
    if rho >= doc["targets"]["held_out_spearman"] or sign >= doc["targets"]["held_out_sign_right_or_both_noise"]:
        problems.append("time_model: the held-out rows meet a target the README says is missed")
    return problems


def service_on_gpu() -> list[str]:
    """The leaderboard on a GPU: the H100 run ranks three honest users by their measured scores (each passed its
    public and secret run); chaos (chaos/chaos_h100.json) gave every submission its expected verdict, lost and
    doubled nothing, and the service and a worker lived through a worker killed from outside; suggestions
    (suggest/suggest_h200.json) shown as gains were measured faster."""
    problems = []
    board = runs_of("leaderboard_h100", "leaderboard_h100.json")
    scores = [r["score_ms"] for r in board["ranking"]]
    if len(scores) != 3 or scores != sorted(scores) or not all(
            s["passed"] and s["secret_run"]["passed"] and s["measured_on"] == board["device"]
            for s in board["submissions"]):
        problems.append("leaderboard_h100: the ranking is not three passed users in score order")
    chaos = runs_of("chaos", "chaos_h100.json")
    subs = chaos["submissions"]
    if not (chaos["all_as_expected"] and chaos["nothing_lost_or_duplicated"] and chaos["server_alive_at_end"]
            and chaos["workers_alive_at_end"] >= 1 and chaos["worker_killed_from_outside"]["pid"]
            and all(s["as_expected"] and s["exactly_once"] and not s["leaked"] for s in subs)
            and all(s["passed"] == (s["kind"] != "hostile") for s in subs)):
        problems.append("chaos: a submission not as expected, lost, doubled or leaked, or the service died")
    suggest = runs_of("suggest", "suggest_h200.json")["summary"]
    if suggest["shown_as_gain_but_not_measured_faster"] or not suggest["measured_gains_outside_noise"]:
        problems.append(f"suggest: {suggest}")
    return problems


def gpu_swizzle_check() -> list[str]:
    """Every swizzle family compiled for the GPU ran the permutation the numpy evaluator predicts
    (gpu_swizzle_check/gpu_swizzle_check_h100.json), on grids that are not all multiples of 8."""
    doc = runs_of("gpu_swizzle_check", "gpu_swizzle_check_h100.json")
    rows = doc["rows"]
    if not (doc["device"].startswith("NVIDIA H100") and doc["all_match"] and len(rows) == doc["n_cases"] >= 40
            and all(r["match"] for r in rows) and any(g % 8 for r in rows for g in r["grid"])):
        return ["gpu_swizzle_check: not every compiled order matched its predicted permutation on an H100"]
    return []


def studies() -> list[Path]:
    """The study folders (not lab/, the code they share, nor caches)."""
    return sorted(p for p in ROOT.iterdir() if p.is_dir() and p.name != "lab" and not p.name.startswith(("_", ".")))


def every_study_names_its_device_and_command() -> list[str]:
    """Each study folder has a run script, a README of at most 300 lines, and each of its JSON results (its summary,
    or the small result run.py wrote) says device and command."""
    problems = []
    for folder in studies():
        if not any(folder.glob("*.py")) and not (folder / "run.sh").is_file():
            problems.append(f"{folder.name}: no script")
        readme = folder / "README.md"
        if not readme.is_file() or len(readme.read_text().splitlines()) > README_MAX_LINES:
            problems.append(f"{folder.name}: no README.md, or one over {README_MAX_LINES} lines")
        for path in sorted(p for p in folder.glob("*.json") if p.name != archive.MANIFEST):
            record = json.loads(path.read_text())
            if isinstance(record, dict) and not {"device", "system", "measured_device"} & set(record):
                problems.append(f"{path.relative_to(ROOT)}: no device")
    return problems


def raw_data() -> list[str]:
    """Raw data kept out of git: a study with a manifest has a summary.py and summary.json (or commits its small
    result instead); the raw files present hash to the manifest, and a study whose raw files are all present
    summarizes to its committed summary.json byte for byte."""
    problems = []
    for name in archive.studies():
        folder = ROOT / name
        problems += archive.verify(folder)
        present, _ = archive.raw_state(folder)
        total = len(archive.load_manifest(folder))
        if present and len(present) < total:
            problems.append(f"{name}: {len(present)} of {total} raw files present; "
                            f"python benchmarks/archive.py restore {name}")
        if (folder / "summary.py").is_file() != (folder / archive.SUMMARY).is_file():
            problems.append(f"{name}: summary.py and summary.json go together")
        elif (folder / "summary.py").is_file() and len(present) == total:
            if archive.summary_text(folder) != (folder / archive.SUMMARY).read_text():
                problems.append(f"{name}: summary.json is not what summary.py makes of the raw files; "
                                f"python benchmarks/archive.py summarize {name}")
    return problems


def tree_keeps_raw_data_out() -> list[str]:
    """No tracked file under benchmarks/ is one .gitignore calls raw (it would be committed raw data), and every
    benchmarks/ path README.md, docs/ and src/ name is tracked or listed in a manifest."""
    top = ROOT.parent
    done = subprocess.run(["git", "-C", str(top), "ls-files", "-ci", "--exclude-standard", "benchmarks"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return []  # not a git checkout (an unpacked copy): nothing to compare
    problems = [f"{p}: tracked, but .gitignore calls it raw data" for p in done.stdout.split()]
    tracked = set(subprocess.run(["git", "-C", str(top), "ls-files", "benchmarks"], capture_output=True,
                                 text=True).stdout.split())
    known = tracked | {f"benchmarks/{name}/{f.path}" for name in archive.studies()
                       for f in archive.load_manifest(ROOT / name)}
    folders = {str(Path(p).parent) for p in known} | {str(p) for q in known for p in Path(q).parents}
    texts = [top / "README.md", *sorted((top / "docs").rglob("*.md")), *sorted((top / "src").rglob("*.py"))]
    for path in texts:
        for ref in cited_paths(path.read_text()):
            if ref not in known and ref not in folders and not any(Path(k).match(ref) for k in known):
                problems.append(f"{path.relative_to(top)}: names {ref}, in no study")
    return problems


def cited_paths(text: str) -> list[str]:
    """The benchmarks/ paths a text names (a trailing slash, "'s" or punctuation dropped; globs kept, placeholders such
    as benchmarks/<study> left out)."""
    words = text.replace("`", " ").replace("(", " ").replace(")", " ").replace(",", " ").split()
    words = [w.removesuffix("'s").rstrip(".:;'\"/") for w in words if w.startswith("benchmarks/") and "<" not in w]
    return sorted({w for w in words if len(w) > len("benchmarks/")})


def sim_validation() -> list[str]:
    """The simulator's validation set (issue 15): >= 40 rows per GPU on an H100 and an H200, each with the fields
    the issue names, orders that differ within each case, held-out rows reported apart from the fit rows."""
    table = summary("sim_validation")["table"]
    problems = list(table["row_problems"])
    for gpu in ("H100", "H200"):
        rows = sum(n for device, n in table["well_formed_rows"].items() if gpu in device)
        if rows < 40:
            problems.append(f"{rows} well-formed rows on the {gpu}, fewer than 40")
        flat = [key for device, cases in table["case_spread_pp"].items() if gpu in device
                for key, spread in cases.items() if spread < 2.0]
        if flat:
            problems.append(f"{gpu}: cases whose orders all measure within 2 pp: {flat}")
    if set(table["sets"]) != {"fit", "held_out"}:
        problems.append("the sets are not fit / held_out")
    if not table["all_output_correct"]:
        problems.append("a measured kernel's output was wrong")
    if not table["held_out"] or table["held_out"]["all"]["rows"] < 40:
        problems.append("no held-out summary of at least 40 rows")
    return problems


def sim_speed() -> list[str]:
    """Issue 15's speed targets as the committed runs measured them: one CI core >= 30 M accesses/s, the GPU host's
    CPU >= 100 M/s, the GPU engine's default batch >= 1 G/s with its results equal to the CPU engine's, the search
    >= 200 candidates a minute on either engine, overshooting its budget by at most its longest candidate."""
    problems = []
    runs = summary("sim_speed")["runs"]
    cpu = runs["sim_speed_cpu.json"]["stages"]
    host = runs["sim_speed_gpuhost_h100.json"]
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
        run = runs[f"sim_speed_gpuhost_h100_{name}.json"]
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
    exploits = summary("exploits_h100")
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
    overhead = summary("eval_overhead_h100")["runs"]["eval_overhead_shared_loop.json"]
    tasks = {c["task"] for c in overhead["cases"]}
    if not {"histogram", "matmul"} <= tasks:
        problems.append(f"overhead study covers {sorted(tasks)}, not histogram and matmul")
    for c in overhead["cases"]:
        if not c.get("within_2pct") or abs(c["mean_ms"]["C"] / c["mean_ms"]["T"] - 1) > 0.02:
            problems.append(f"overhead {c['task']} {c['case']}: isolated vs --trusted {c.get('isolated_vs_trusted')}")
    return problems


def placement_probe() -> list[str]:
    """The placement probe of the missed pairs (issue 15): one file per GPU, every output right, every pair of every
    case analysed, and none placement-bound, as the sim_validation README says."""
    problems = []
    probes = summary("sim_validation")["placement_probe"]
    for gpu, device in (("h100", "NVIDIA H100"), ("h200", "NVIDIA H200")):
        probe = probes[gpu]
        if not probe["device"].startswith(device) or probe["failures"]:
            problems.append(f"{gpu}: device {probe['device']!r}, {probe['failures']} failure(s)")
        if not probe["rows"] or not probe["all_output_correct"]:
            problems.append(f"{gpu}: no rows or a wrong output")
        if len(probe["placements"]) < 6:
            problems.append(f"{gpu}: {len(probe['placements'])} placements measured, fewer than the registered 6")
        pairs = set(probe["analysed_pairs"])
        for case, orders in probe["orders_by_case"].items():
            missing = [f"{case} {a} - {b}" for i, a in enumerate(orders) for b in orders[i + 1:]
                       if f"{case} {a} - {b}" not in pairs]
            if missing:
                problems.append(f"{gpu}: pairs not analysed: {missing}")
        if probe["placement_bound"]:
            problems.append(f"{gpu}: placement-bound pairs {probe['placement_bound']}, where the README says none")
    return problems


def right_rows(rows_file: dict, gpu: str, count: int) -> bool:
    """Whether a run.py rows file (as the summary gives it) holds `count` rows measured on a GPU named `gpu`...,
    every output right."""
    return rows_file["device"].startswith(gpu) and not rows_file["failures"] and rows_file["rows"] == count \
        and rows_file["output_correct"] == count


def follows_rule(test: dict) -> bool:
    """Whether a page_test.py verdict follows its numbers: the term is adopted iff it has fewer tau misses, or as
    many and a lower targets loss, and stays within 3 pp and 10% on the set."""
    on, off = test["on"]["test_set"], test["off"]["test_set"]
    wins = (on["tau_misses"], on["targets_loss"]) < (off["tau_misses"], off["targets_loss"])
    return test["adopted"] == (wins and on["mae_l2_hit_pp"] <= 3.0 and on["mean_rel_error_dram_read"] <= 0.1)


def page_noise() -> list[str]:
    """The models' page noise (issue 15): the page set measured on an H200 and an H100 with every output right, the
    registered rules' verdicts (H200 adopts, H100 does not) following their own numbers, and the table predicted
    with page noise on the H200's rows alone."""
    problems = []
    study = summary("sim_validation")
    for sub, gpu in (("page/h200/sim_ncu_rows_nvidia_h200.json", "NVIDIA H200"),
                     ("page/h100/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100")):
        if not right_rows(study["rows_files"][sub], gpu, 72):
            problems.append(f"page set: not 72 right rows measured on an {gpu}")
    for name, gpu, adopted in (("page/page_test.json", "NVIDIA H200", True),
                               ("page/page_test_h100.json", "NVIDIA H100", False)):
        test = study["rule_tests"][name]
        if not follows_rule(test) or test["adopted"] != adopted or len(test["measured_device"]) != 1 \
                or not test["measured_device"][0].startswith(gpu):
            problems.append(f"{name}: adopted {test['adopted']} does not follow its numbers, or not the README's verdict")
    table = study["table"]
    if table["fitted"].get("fitted_page_noise") != "model":
        problems.append(f"sim_validation.json: fitted_page_noise {table['fitted'].get('fitted_page_noise')!r}, "
                        "not 'model'")
    for device, said in table["page_noise_by_device"].items():
        if any(("page_noise 0.9" in s) != device.startswith("NVIDIA H200") for s in said):
            problems.append(f"sim_validation.json: {device} rows predicted with the wrong page noise ({said})")
    return problems


def program_pace() -> list[str]:
    """The program-pace test (issue 15): the pace set measured on an H100 (two calls) and an H200 with every output
    right, the registered rule's verdict (not adopted) following its own numbers, and the table without program pace."""
    problems = []
    study = summary("sim_validation")
    for sub, gpu in (("pace/h100/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100"),
                     ("pace/h100_b/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100"),
                     ("pace/h200/sim_ncu_rows_nvidia_h200.json", "NVIDIA H200")):
        if not right_rows(study["rows_files"][sub], gpu, 78):
            problems.append(f"pace set: {sub} is not 78 right rows measured on an {gpu}")
    test = study["rule_tests"]["pace/pace_test.json"]
    if test["set"] != "pace" or not follows_rule(test) or test["adopted"] \
            or sorted(test["measured_device"]) != ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]:
        problems.append("pace_test.json: adopted does not follow its numbers, or not the README's verdict (not adopted)")
    program_cv = study["table"]["fitted"].get("fitted_program_cv")
    if program_cv != 0.0:
        problems.append(f"sim_validation.json: fitted_program_cv {program_cv!r}, not 0")
    return problems


def ncu_replicate() -> list[str]:
    """The replication rule (issue 15): one fresh ncu run of every table row on an H100 and an H200, every output
    right; the verdict follows its counts and is the README's (ncu's own means rank the fresh run better than the
    model); and the table holds the fresh runs."""
    problems = []
    study = summary("sim_validation")
    for gpu, tag in (("NVIDIA H100", "nvidia_h100_80gb_hbm3"), ("NVIDIA H200", "nvidia_h200")):
        for name, count in (("table", 45), ("fresh", 31), ("page", 24), ("pace", 26)):
            sub = f"replicate/{gpu.split()[1].lower()}/{name}/sim_ncu_rows_{tag}.json"
            if not right_rows(study["rows_files"][sub], gpu, count):
                problems.append(f"sim_validation/{sub}: not {count} right rows measured on an {gpu}")
    test = study["replicate_test"]
    held = test["cases_below_tau_target"]["held_out"]
    follows = (held["n_model"] <= held["n_ncu"]) == test["verdict"].startswith("the model ranks")
    if not follows or test["verdict"] != "ncu ranks orders more reproducibly than the model" or test["left_out"] \
            or held["scored_cases"] != 54:
        problems.append("replicate_test.json: the verdict does not follow its counts, or is not the README's")
    if "benchmarks/sim_validation/replicate/h200/pace/sim_ncu_rows_nvidia_h200.json" \
            not in study["table"]["command_inputs"]:
        problems.append("sim_validation.json: the fresh runs of the replication rule are not in the table")
    return problems


DEEP_H100 = {"fresh0": 15, "fresh1": 12, "pace3": 36, "pace4": 36, "pace5": 4}
DEEP_H200 = {"0": 55, "1": 15, "2": 16, "3": 20}


def floor_problems(name: str, floor: dict, runs: dict[str, list[int]]) -> list[str]:
    problems = []
    if floor["today_case_runs"] != runs:
        problems.append(f"{name}: not drawn on the table it names (cases or runs a row differ)")
    p_today = floor["today_groups"]["held_out"]["perfect_p_all"]
    needed = next((d for d in floor["deeper"] if d["held_out_perfect_p_all"] >= floor["p_all_target"]), None)
    if p_today >= floor["p_all_target"]:
        expected = "open"
    elif needed is not None and needed["device_s_missing_total"] <= floor["session_ncu_s"]:
        expected = "measure"
    else:
        expected = "blocked"
    if not floor["decision"].startswith(expected) or floor["draws"] != 4000:
        problems.append(f"{name}: the decision is not the rule's ({expected}) or not 4000 draws")
    return problems


def ncu_floor() -> list[str]:
    """The floor rules (issue 15): the deeper runs are right and in the table (the H200's rebuilt from its call's log,
    which matches run.py's rows wherever both exist); the floor was drawn on the table before them
    (`ncu_floor.json`) and again after (`ncu_floor_deep.json`), each decision as the rule fixed it."""
    problems = []
    study = summary("sim_validation")
    files = [(f"deep/h100/{k}/sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "NVIDIA H100", n) for k, n in DEEP_H100.items()]
    files += [(f"deep/h200/{k}/sim_ncu_rows_nvidia_h200.json", "NVIDIA H200", n) for k, n in DEEP_H200.items()]
    for sub, gpu, count in files:
        doc = study["rows_files"][sub]
        if gpu == "NVIDIA H100":  # rows as run.py wrote them, every output checked
            ok = right_rows(doc, gpu, count) and not doc["rebuilt_from_log"]
        else:  # rebuilt from the log: no output check recorded, the call's failures none
            ok = doc["rebuilt_from_log"] and doc["device"].startswith(gpu) and not doc["failures"] \
                and doc["rows"] == count
        if not ok:
            problems.append(f"sim_validation/{sub}: not {count} rows of an {gpu} as the deepening measured them")
        if f"benchmarks/sim_validation/{sub}" not in study["table"]["command_inputs"]:
            problems.append(f"sim_validation/{sub}: not in sim_validation.json's command")
    floors = study["floors"]
    problems += floor_problems("ncu_floor.json", floors["ncu_floor.json"], study["table_case_runs_before_deep"])
    problems += floor_problems("ncu_floor_deep.json", floors["ncu_floor_deep.json"], study["table"]["case_runs"])
    return problems


def seed_orders() -> list[str]:
    """The original MI300X work's formulas (seed_orders/seed_orders_cpu.json, issue 56): all 29 accepted as written
    for their tasks' kernels, a per-task agreement for every case; at the built-in sub-line transpose case every
    XCD remap (iterations 1, 2, 3, 6, 8, 9) predicted >= 20 points above the kernel's own order and the others
    within 1 point, all eight predicted hit-rate changes in the original's class; at the original's 32768^2 the
    remaps it measured at ~24% whose output lines pair on one XCD (1, 3, 6) agree, and the three that disagree
    (2, 8, 9) pair their read halves on one XCD within 64 of its programs and their write halves beyond what its
    L2 holds, which README.md gives as the reason."""
    problems = []
    report = json.loads((ROOT / "seed_orders" / "seed_orders_cpu.json").read_text())
    cases = {(c["task"], c["sizes"].get("m")): c for c in report["cases"]}
    accepted = {}
    for case in report["cases"]:
        accepted[case["task"]] = sum(r["accepted"] for r in case["rows"])
        if not {"hit_change_agrees", "speed_class_agrees", "compared"} <= set(case["agreement"]):
            problems.append(f"{case['task']} {case['case']}: no agreement figures")
    if accepted != {"transpose": 9, "matmul": 2, "spmv": 8, "lean_attention": 10}:
        problems.append(f"formulas accepted per task: {accepted}")
    built_in, original = cases.get(("transpose", 4096)), cases.get(("transpose", 32768))
    if built_in is None or original is None:
        return problems + ["no transpose case at 4096^2 or 32768^2"]
    own = built_in["own_order"]["predicted"]["hit_pct"]
    for row in built_in["rows"]:
        hit = row.get("predicted", {}).get("hit_pct")
        remap = row["iteration"] in (1, 2, 3, 6, 8, 9)
        if row["iteration"] != 5 and (hit is None or (remap and hit < own + 20) or (not remap and abs(hit - own) > 1)):
            problems.append(f"transpose 4096^2 iteration {row['iteration']}: predicted {hit}% against own {own}%")
    agreed = built_in["agreement"]
    if not agreed["hit_change_agrees"] == agreed["speed_class_agrees"] == agreed["compared"] == 8:
        problems.append(f"transpose 4096^2: {agreed}")
    if sorted(original["agreement"]["disagree_iterations"]) != [2, 8, 9]:
        problems.append(f"transpose 32768^2 disagrees at {original['agreement']['disagree_iterations']}, not 2, 8, 9")
    by_id = {r["permutation_id"]: r["iteration"] for r in original["rows"] if r.get("predicted")}
    for pid, partners in (original.get("orders") or {}).items():
        if by_id.get(pid) in (2, 8, 9):
            read, write = partners["read"], partners["write"]
            if not (read["same_xcd"] == 1 and read["median_programs_apart"] <= 64
                    and (write["median_programs_apart"] or 0) > 512):
                problems.append(f"transpose 32768^2 order {pid}: partners {partners} do not explain the disagreement")
    return problems


def chaos() -> list[str]:
    """Issue 57 on every committed chaos run: no process of an evaluation outlived its worker or the service, every
    hostile verdict named the limit it broke, an honest submission passed after each ending, nothing lost."""
    problems = []
    for path in sorted((ROOT / "chaos").glob("chaos_*.json")):
        run = json.loads(path.read_text())
        if "orphans" not in run:  # a run from before the endings were recorded
            continue
        name = path.name
        if not run.get("no_orphans") or any(v != 0 for v in run["orphans"].values()):
            problems.append(f"{name}: processes outlived their evaluator: {run['orphans']}")
        if not run.get("all_as_expected") or not all(run.get("breaches_named", {}).values()):
            problems.append(f"{name}: a verdict not as expected: {run.get('breaches_named')}")
        if not run.get("honest_after_each_ending") or not run.get("nothing_lost_or_duplicated"):
            problems.append(f"{name}: an honest submission failed after an ending, or a job was lost or run twice")
    return problems


def optimize_recall() -> list[str]:
    """Issue 54's recall study: every committed optimize_recall_*.json (one at least) is one GPU's, keeps no
    regression, its summary counts its cases and the README states how many meet the bars."""
    files = sorted((ROOT / "optimize_recall").glob("optimize_recall_*.json"))
    problems = [] if files else ["optimize_recall: no committed run"]
    for path in files:
        doc = json.loads(path.read_text())
        cases = doc["cases"]
        if not doc["device"] or any(c["device"] not in (None, doc["device"]) for c in cases):
            problems.append(f"{path.name}: cases from several devices, or none named")
        if doc["summary"]["meet"] != sum(c["meets"] for c in cases) or doc["summary"]["cases"] != len(cases):
            problems.append(f"{path.name}: the summary does not count its cases")
        claim = f"{doc['summary']['meet']} meet the bars, {doc['summary']['regressions_kept']} regressions kept"
        if claim not in (ROOT / "optimize_recall" / "README.md").read_text().replace("**", ""):
            problems.append(f"{path.name}: the README does not say '{claim}'")
        problems += [f"{path.name} {c['name']}: a regression kept" for c in cases if c["regressions_kept"]]
    return problems


# Each study and the checks of its claims: a study folder without an entry here fails every_study_has_a_check.
CLAIMS: dict[str, tuple[Callable[[], list[str]], ...]] = {
    "sim_validation": (sim_validation, placement_probe, page_noise, program_pace, ncu_replicate, ncu_floor),
    "sim_speed": (sim_speed,), "time_model": (time_model,), "trace_derive": (trace_derive,),
    "gpu_swizzle_check": (gpu_swizzle_check,), "wild_gpu": (wild_gpu,),
    "exploits_h100": (evaluator_h100,), "eval_overhead_h100": (evaluator_h100,),
    "leaderboard_h100": (service_on_gpu,), "chaos": (service_on_gpu, chaos), "suggest": (service_on_gpu,),
    "seed_orders": (seed_orders,), "llm_proposer": (llm_proposer,), "optimize_recall": (optimize_recall,),
}


def every_study_has_a_check() -> list[str]:
    """Every study folder has claims that a check reads (CLAIMS), and CLAIMS names no folder that is gone."""
    found = {p.name for p in studies()}
    return [f"{name}: a study without a check in check_results.CLAIMS" for name in sorted(found - set(CLAIMS))] + \
        [f"{name}: in check_results.CLAIMS but not a study folder" for name in sorted(set(CLAIMS) - found)]


CHECKS: tuple[Callable[[], list[str]], ...] = (
    *dict.fromkeys(check for checks in CLAIMS.values() for check in checks), every_study_names_its_device_and_command,
    every_study_has_a_check, raw_data, tree_keeps_raw_data_out)


def main() -> int:
    failed = [f"{check.__name__}: {problem}" for check in CHECKS for problem in check()]
    for line in failed:
        print(line)
    print(f"{len(CHECKS)} checks, {len(failed)} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
