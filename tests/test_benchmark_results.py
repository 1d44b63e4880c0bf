"""The committed GPU results say what the issues claim of them: benchmarks/check_results.py finds no problem, on the
committed summaries alone (as on CI, where the raw data is absent) and, where it is present, on the raw data too."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

from benchmarks import archive, check_results
from benchmarks.sim_validation import summary as validation_summary
from swizzlelab.sim import simulate
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task

ROOT = Path(check_results.__file__).resolve().parent


@pytest.fixture
def checker(monkeypatch, tmp_path):
    """check_results on a copy of the committed tree (summaries, manifests, small results; no raw data)."""
    for study in check_results.studies():
        shutil.copytree(study, tmp_path / study.name, ignore=lambda folder, names: [
            n for n in names if (Path(folder) / n).is_file() and not _committed(Path(folder) / n)])
    monkeypatch.setattr(check_results, "ROOT", tmp_path)
    monkeypatch.setattr(archive, "ROOT", tmp_path)
    return check_results


def _committed(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    study = ROOT / rel.parts[0]
    raw = {f.path for f in archive.load_manifest(study)} if (study / archive.MANIFEST).is_file() else set()
    return rel.relative_to(rel.parts[0]).as_posix() not in raw and path.name != archive.ARCHIVE


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_every_check_passes():
    problems = {check.__name__: check() for check in check_results.CHECKS}
    assert not any(problems.values()), problems


def test_every_check_passes_without_the_raw_data(checker):
    """A fresh clone has no raw data: the checks read the committed summaries alone."""
    assert not list(checker.ROOT.glob("*/**/*.npz")) and not list(checker.ROOT.glob("*/*.log"))
    problems = {check.__name__: check() for check in checker.CHECKS if check is not checker.tree_keeps_raw_data_out}
    assert not any(problems.values()), problems


def test_raw_data_that_differs_or_is_partly_there_is_reported(checker, tmp_path):
    """A raw file whose bytes differ from the manifest's hash, or a study with only some raw files, is reported."""
    name = "exploits_h100"
    first = archive.load_manifest(tmp_path / name)[0]
    (tmp_path / name / first.path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name / first.path).write_text("not the measured file")
    problems = checker.raw_data()
    assert any(first.path in p and "sha256" in p for p in problems)
    assert any(p.startswith(f"{name}: 1 of ") for p in problems)


def test_a_summary_that_is_not_the_raw_datas_is_reported(checker, tmp_path):
    """Raw files that summarize to the committed summary pass; the summary edited by hand no longer matches them.
    (The raw file is made back from exploits_h100's summary, which keeps what summary.py reads of exploits_h100.json,
    and takes the place of the measured one in the manifest.)"""
    folder = tmp_path / "exploits_h100"
    committed = json.loads((folder / archive.SUMMARY).read_text())
    (folder / "exploits_h100.json").write_text(json.dumps({k: v for k, v in committed.items() if k != "summary_of"}))
    (folder / archive.MANIFEST).write_text(archive.manifest_text("exploits_h100", []))
    archive.add(folder, [str(folder / "exploits_h100.json")])
    assert not checker.raw_data()
    _edit(folder / archive.SUMMARY, lambda doc: doc["summary"].update(fooled=1))
    assert any(p.startswith("exploits_h100: summary.json is not what summary.py makes") for p in checker.raw_data())


def test_the_evaluator_check_can_fail(checker, tmp_path):
    """A fooled exploit in a copy of the results is reported."""
    path = tmp_path / "exploits_h100" / archive.SUMMARY
    row = next(r for r in json.loads(path.read_text())["rows"] if r["kind"] == "exploit")
    _edit(path, lambda doc: next(r for r in doc["rows"] if r["name"] == row["name"]).update(fooled=True))
    assert any(row["name"] in problem for problem in checker.evaluator_h100())


def _row(**change) -> dict:
    row = {"task": "matmul", "case": {"seed": 1, "m": 64}, "order": "row_major", "device": "NVIDIA H100 80GB HBM3",
           "set": "fit", "predicted_l2_hit_pct": 50.0, "measured_l2_hit_pct": 60.0, "predicted_dram_read_bytes": 1e6,
           "measured_dram_read_bytes": 1e6, "output_correct": True, "predicted_by": "predicted (model H100-SXM)",
           "occupancy": 2, "measured_dram_read_bytes_runs": [1e6]}
    row.update(change)
    return row


def test_the_validation_row_check_can_fail(checker, tmp_path):
    """A validation row without a measured hit rate, or with a hit rate outside 0..100, is reported: the summary
    made of such a table carries the rows' problems into the check."""
    rows = [_row(order=f"o{i}", measured_l2_hit_pct=40.0 + 5 * i) for i in range(6)]
    del rows[3]["measured_l2_hit_pct"]
    rows[5]["predicted_l2_hit_pct"] = 140.0
    table = json.loads((tmp_path / "sim_validation" / archive.SUMMARY).read_text())["table"]
    fake = {"command": "python validate.py out.json in.json", "rows": rows, "fit": {}, "held_out": table["held_out"],
            **{k: table[k] for k in ("targets", "progress_model")}, **table["fitted"]}
    summary_path = tmp_path / "sim_validation" / archive.SUMMARY
    _edit(summary_path, lambda doc: doc.update(table=validation_summary.table_summary(fake)))
    problems = checker.sim_validation()
    assert any(p.startswith("row 3: measured_l2_hit_pct") for p in problems)
    assert any(p.startswith("row 5: predicted_l2_hit_pct") for p in problems)
    assert any(p.startswith("4 well-formed rows on the H100") for p in problems)


def test_the_gpu_study_checks_can_fail(checker, tmp_path):
    """Each GPU study's check reports a result that no longer says what its README claims."""
    def edit(study, name, change):
        _edit(tmp_path / study / name, change)

    edit("wild_gpu", "wild_gpu_nvidia-h200.json", lambda doc: doc["runs"]["t09"]["best_speedup"].update(value=0.9))
    assert any("t09" in p for p in checker.wild_gpu())
    edit("wild_gpu", "wild_gpu_nvidia-h100-80gb-hbm3.json",
         lambda doc: doc["runs"]["vllm"]["best_speedup"].update(kind="predicted (model H100-SXM)"))
    assert any("vllm" in p and "not a measured gain" in p for p in checker.wild_gpu())
    recall = tmp_path / "optimize_recall"
    for committed in recall.glob("optimize_recall_*.json"):
        committed.unlink()
    assert checker.optimize_recall() == ["optimize_recall: no committed run"]
    (recall / "optimize_recall_x.json").write_text(json.dumps({"device": "GPU", "summary": {
        "cases": 2, "meet": 1, "regressions_kept": 1}, "cases": [{"name": "spmv", "device": "GPU", "meets": False,
                                                                  "regressions_kept": 1}]}))
    problems = checker.optimize_recall()
    assert any("spmv: a regression kept" in p for p in problems)
    assert any("does not count its cases" in p for p in problems)
    assert any("the README does not say '1 meet the bars, 1 regressions kept'" in p for p in problems)
    edit("time_model", "time_model_h100.json",
         lambda doc: next(r for r in doc["rows"] if r["set"] == "held_out").update(measured_speedup=9.0))
    assert any("from the rows" in p for p in checker.time_model())
    edit("chaos", "chaos_h100.json", lambda doc: doc["submissions"][0].update(exactly_once=False))
    edit("suggest", "suggest_h200.json", lambda doc: doc["summary"].update(shown_as_gain_but_not_measured_faster=1))
    assert {p.split(":")[0] for p in checker.service_on_gpu()} == {"chaos", "suggest"}
    edit("gpu_swizzle_check", "gpu_swizzle_check_h100.json", lambda doc: doc["rows"][7].update(match=False))
    assert checker.gpu_swizzle_check()


def test_a_study_without_a_check_is_reported(checker, tmp_path):
    (tmp_path / "new_study").mkdir()
    assert checker.every_study_has_a_check() == ["new_study: a study without a check in check_results.CLAIMS"]


def test_the_speed_check_can_fail(checker, tmp_path):
    """A GPU batch under 1 G accesses/s, or one whose result differs from the CPU engine's, is reported."""
    def slow_and_wrong(doc):
        stages = doc["runs"]["sim_speed_gpuhost_h100.json"]["stages"]
        next(r for r in stages["gpu_batch"] if r["default_concurrency"])["accesses_per_s"] = 0.9e9
        stages["gpu_batch"][0]["equal_to_cpu_engine"]["grouped:GROUP_M=8"] = False

    _edit(tmp_path / "sim_speed" / archive.SUMMARY, slow_and_wrong)
    problems = checker.sim_speed()
    assert any("under 1 G" in p for p in problems)
    assert any("differs from the CPU engine" in p for p in problems)


def test_the_committed_validation_table_is_the_current_models():
    """sim_validation.json was fitted at the simulator's defaults and predicts as it does today: its fitted values are
    the defaults, and two rows of an L2-bound kernel (SM pace on each GPU's GPC layout) simulate to the same numbers."""
    params_module = importlib.import_module("swizzlelab.sim.params")
    table = json.loads((ROOT / "sim_validation" / archive.SUMMARY).read_text())["table"]
    doc = table["fitted"]
    assert (doc["fitted_step_cv"], doc["fitted_dram_saturation"], doc["fitted_miss_gain"], doc["fitted_lrc_window"]) \
        == (params_module.STEP_TIME_CV_SATURATING, params_module.DRAM_SATURATION,
            params_module.SATURATION_MISS_GAIN, params_module.LRC_WINDOW)
    assert doc["fitted_gpc_bound"] == "model" and table["progress_model"] == params_module.DEFAULT_PROGRESS
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    assert {r["device"] for r in table["anchor_rows"]} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    for gpu in ("H100", "H200"):
        row = next(r for r in table["anchor_rows"] if gpu in r["device"])
        case = row["case"]
        args, consts = task.swizzle_args(case, config)
        perm = to_permutation(task.parse_order(row["order"]), task.tile_grid(case, config), args, consts)
        res = simulate(task.access_model(case, config=config), perm, gpu.lower(), occupancy=int(row["occupancy"]))
        assert (100 * res.l2_hit_rate, res.dram_read_bytes) == pytest.approx(
            (row["predicted_l2_hit_pct"], row["predicted_dram_read_bytes"]), rel=1e-12), gpu
