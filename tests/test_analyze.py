"""Memory analysis and the `analyze` / `simulate` commands on small matmul and transpose cases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from swizzlelab.errors import UserError
from swizzlelab.sim import analyze, index_periods, periods_by_traffic
from swizzlelab.scenario import apply_sizes
from swizzlelab.tasks import load_task
from swizzlelab.trace import TraceBuilder

MATMUL = {"m": 512, "n": 384, "k": 256}


@pytest.fixture(scope="module")
def matmul_trace():
    task = load_task("matmul")
    return task.access_model(MATMUL, config=task.kernel.GPU_CONFIG)


def test_matmul_footprints_reuse_and_sharing(matmul_trace):
    result = analyze(matmul_trace, "h100")
    grid = (512 // 128, 384 // 128)
    assert result.grid == grid and result.n_programs == 12
    by_name = {t.name: t for t in result.tensors}
    a, b, c = by_name["a_ptr"], by_name["b_ptr"], by_name["c_ptr"]
    assert a.touched_bytes == 512 * 256 * 2 and b.touched_bytes == 256 * 384 * 2 and c.touched_bytes == 512 * 384 * 2
    # each A row panel is read by every tile of its row (grid[1] of them), each B panel by grid[0] tiles
    assert a.requested_bytes == grid[1] * a.touched_bytes and a.programs_per_line_max == grid[1]
    assert b.requested_bytes == grid[0] * b.touched_bytes and b.programs_per_line_mean == grid[0]
    assert c.programs_per_line_max == 1
    per_program = 128 * 256 * 2 * 2 + 128 * 128 * 2  # A panel + B panel + C tile
    assert result.bytes_per_program_mean == per_program == result.bytes_per_program_max
    assert result.compulsory_bytes == a.touched_bytes + b.touched_bytes + c.touched_bytes
    assert result.compulsory_read_bytes == a.touched_bytes + b.touched_bytes  # C is only written
    assert result.best_hit_rate == pytest.approx(1 - result.compulsory_read_bytes / result.requested_bytes)
    fractions = {(s.tensor, s.relation): s.fraction for s in result.sharing}
    assert fractions[("a_ptr", "the same pid_m")] == 1.0
    assert fractions[("b_ptr", "the same pid_m")] == 0.0
    assert fractions[("b_ptr", "the same pid_n")] == 1.0
    assert fractions[("a_ptr", "different pid_m and pid_n")] == 0.0
    assert "programs with the same pid_m share 100% of their a_ptr lines (from trace)" in result.statements
    assert 0 < result.identity.l2_hit_rate <= result.best_hit_rate
    text = result.text()
    assert "predicted (model H100-SXM" in text and "from trace" in text
    record = json.loads(json.dumps(result.to_dict()))
    assert record["identity"]["kind"] == "predicted (model H100-SXM)"


def test_analyze_with_an_order_reports_it(matmul_trace):
    perm = np.arange(12).reshape(4, 3).T.ravel()
    result = analyze(matmul_trace, "mi300x", perm=perm, order_label="column_major")
    assert result.current is not None and result.current.model == "MI300X"
    assert "column_major: L2 hit" in result.text()


def test_size_options_keep_types_and_reject_unknown_names():
    case = {"seed": 1, "m": 4, "dtype": "float16"}
    assert apply_sizes(["m=8", "dtype=float32"], case) == {"seed": 1, "m": 8, "dtype": "float32"}
    for bad in (["m"], ["q=3"], ["m=x"], ["seed=3"]):
        with pytest.raises(UserError):
            apply_sizes(bad, case)


def test_cli_simulate_and_analyze_json():
    from swizzlelab.cli import app

    runner = CliRunner()
    sizes = ["--size", "m=512", "--size", "n=512", "--size", "k=256"]
    out = runner.invoke(app, ["simulate", "matmul", "--order", "row_major", "--order", "grouped:GROUP_M=2",
                              "--target", "h100", *sizes, "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.stdout)
    assert [o["order"] for o in record["orders"]] == ["row_major", "grouped:GROUP_M=2"]
    assert record["kind"] == "predicted (model H100-SXM)"
    assert all(0 <= o["l2_hit_rate"] <= 1 for o in record["orders"])
    out = runner.invoke(app, ["analyze", "transpose", "--size", "m=256", "--size", "n=512", "--target", "mi300x"])
    assert out.exit_code == 0, out.output
    assert "predicted (model MI300X" in out.stdout
    out = runner.invoke(app, ["simulate", "matmul", "--order", "row_major", "--target", "z80", *sizes])
    assert isinstance(out.exception, UserError)
    out = runner.invoke(app, ["simulate", "matmul", "--order", "row_major", "--step-cv", "0", *sizes, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["orders"][0]["step_cv"] == 0.0
    assert record["orders"][0]["step_cv"] > 0  # the fitted default
    out = runner.invoke(app, ["simulate", "matmul", "--order", "row_major", "--step-cv", "2", *sizes])
    assert isinstance(out.exception, UserError)


def test_sparse_line_ids_are_compacted(monkeypatch):
    import importlib

    from swizzlelab.trace import AccessTrace, TensorInfo

    lines = np.array([5, 10**9, 5, 10**9 + 1], dtype=np.int64)
    trace = AccessTrace(lines, np.full(4, 15, np.uint8), np.zeros(4, bool), np.array([0, 2, 4]),
                        np.array([0, 1, 2]), [TensorInfo("lo", 0, 6, 4), TensorInfo("hi", 10**9, 2, 4)], (2,))
    monkeypatch.setattr(importlib.import_module("swizzlelab.sim.analyze"), "MAX_DENSE_LINES", 16)
    result = analyze(trace, "mi300x")
    by_name = {t.name: t for t in result.tensors}
    assert by_name["lo"].programs_per_line_max == 2 and by_name["lo"].requested_bytes == 2 * 128
    assert by_name["hi"].lines_touched == 2 and by_name["hi"].programs_per_line_max == 1
    assert result.compulsory_bytes == 3 * 128


def test_sharing_period_of_a_round_robin_clustered_matrix():
    task = load_task("spmv")
    trace = task.access_model({"seed": 3, "rows": 4096, "cols": 65536, "avg_nnz": 8, "communities": 12},
                              config=task.kernel.GPU_CONFIG)
    periods = index_periods(trace)
    # only x is gathered by rows of one community; the CSR streams are shared by neighbouring rows (period 1)
    assert [(p.tensor, p.period) for p in periods] == [("x_ptr", 12)]
    # a line straddling two community blocks (5461 columns is not a whole number of lines) breaks the period
    assert 0.99 < periods[0].fraction < 1.0 and periods[0].n_pairs > 100
    result = analyze(trace, "h100")
    assert result.periods == periods and periods[0].statement() in result.statements
    assert "multiple of 12 indices apart" in result.text()


def test_periods_by_traffic_puts_the_most_requested_tensor_first():
    # two gathered tensors of a 1-D grid: "light" shared every 4 programs, "heavy" (8 lines a program) every 8
    builder = TraceBuilder((256,))
    light = builder.tensor("light", (4 * 32,), 4)
    heavy = builder.tensor("heavy", (8 * 8 * 32,), 4)
    tile = np.arange(256, dtype=np.int64)
    builder.span(light, tile, 0, 32 * (tile % 4), 32 * (tile % 4) + 32)
    builder.span(heavy, tile, 0, 256 * (tile % 8), 256 * (tile % 8) + 256)
    trace = builder.build()
    assert sorted((p.tensor, p.period) for p in index_periods(trace)) == [("heavy", 8), ("light", 4)]
    ranked = periods_by_traffic(trace)
    requested = {t.name: t.requested_bytes for t in analyze(trace, "h100").tensors}
    assert [p.tensor for p in ranked] == ["heavy", "light"] and requested["heavy"] > requested["light"]


def test_no_sharing_period_without_one(matmul_trace):
    assert index_periods(matmul_trace) == ()  # 2-D grids: relations are reported by `sharing`
    # a 1-D stencil: program i reads elements [32 i, 32 i + 64), so sharers are neighbours, not a period
    builder = TraceBuilder((512,))
    data = builder.tensor("data", (512 * 32 + 64,), 4)
    tile = np.arange(512, dtype=np.int64)
    builder.span(data, tile, 0, 32 * tile, 32 * tile + 64)
    assert index_periods(builder.build()) == ()
