"""Suggestions for kernels whose trace cannot be derived: an spmv submission (data-dependent gathers) traced by the
task's access model after a sample of its programs matched it, through the leaderboard's suggestion path on the
CPU; a kernel that gathers elsewhere refused with the first mismatch; and the attention submission whose order
matters ranked at the leaderboard's benchmark case (slow: 16 GB of inputs and trace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swizzlelab.errors import UserError
from swizzlelab.harness.isolate import Limits
from swizzlelab.hw import resolve_target
from swizzlelab.optimize.suggest import Ask, suggest
from swizzlelab.tasks import load_task
from swizzlelab.userkernel import Inputs, open_user_kernel

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "suggest"
SPMV = {"rows": 3000, "cols": 4096, "avg_nnz": 8, "communities": 4}  # rows of one and of several 32-wide steps


def _ask(task: str, sizes: dict, seed: int, screen_s: float) -> Ask:
    label = " ".join(f"{k}={v}" for k, v in sizes.items()) + f" seed={seed}"
    return Ask(task=task, cases=[{"label": label, "seed": seed, "sizes": sizes, "anchor": None}], labels=[label],
               target="h100", screen_s=screen_s, sim_engine="cpu")


def _shifted(tmp_path: Path) -> Path:
    """The spmv fixture reading x one column to the right of each nonzero: a plausible off-by-one that the task's
    access model does not describe."""
    code = (FIXTURES / "spmv_rows.py").read_text()
    for old, new in (("x_ptr, y_ptr, BLOCK", "x_ptr, y_ptr, n_cols, BLOCK"),
                     ("tl.load(x_ptr + cols, mask=ok,", "tl.load(x_ptr + cols + 1, mask=ok & (cols + 1 < n_cols),"),
                     ('data["x"], out,', 'data["x"], out, data["x"].numel(),')):
        assert old in code
        code = code.replace(old, new)
    path = tmp_path / "spmv_shifted.py"
    path.write_text(code)
    return path


def _opened(path: Path):
    task = load_task("spmv")
    return open_user_kernel(str(path), resolve_target("h100").model, launch="custom_kernel",
                            inputs=Inputs(sizes=dict(SPMV), seed=3, task=task), interpret=True)


@pytest.mark.slow  # over 15 s on CI's 2 cores: run with -m slow
def test_the_spmv_submission_is_suggested_from_the_task_model_checked_on_its_programs():
    code = (FIXTURES / "spmv_rows.py").read_text()
    made = suggest(_ask("spmv", dict(SPMV), 3, 4.0), code, "spmv_rows.py", Limits(compile_s=300, run_s=300), 300,
                   on_gpu=False)
    case = made.cases[0]
    assert "trace task access model (spmv), checked against 32 interpreted programs" in case["trace"], case["trace"]
    assert "the trace cannot be derived" in case["trace"] and case["grid"] == [SPMV["rows"]]
    # x (16 KB) fits in L2 at this size: no order gains, and the headline says so with the best one's figures
    assert made.outcome == "none" and "predicted (time model H100-SXM)" in made.headline, made.headline


def test_the_task_model_trace_equals_the_fully_interpreted_one(monkeypatch):
    kernel = _opened(FIXTURES / "spmv_rows.py")
    modelled = kernel.trace()
    assert modelled.how is not None and modelled.how.model == "spmv"
    kernel._trace, kernel.task_model = None, None
    interpreted = kernel.trace()
    assert interpreted.how is not None and not interpreted.how.model and interpreted.how.derivation is None
    a, b = modelled.trace, interpreted.trace
    # the same lines, sectors and writes per tile (tensor for tensor: each tensor's lines relative to its base)
    def touched(trace, tensor, tile):
        span = slice(*trace.tile_access_range(tile))
        return sorted({(int(line) - tensor.base_line, int(mask), bool(write)) for line, mask, write in
                       zip(trace.lines[span], trace.sector_mask[span], trace.is_write[span])
                       if tensor.base_line <= line < tensor.end_line})

    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for tile in (0, 1, 1234, SPMV["rows"] - 1):
        for ta, tb in zip(a.tensors, b.tensors):
            assert touched(a, ta, tile) == touched(b, tb, tile), (tile, ta.name)


def test_a_kernel_that_gathers_elsewhere_is_refused_with_the_first_mismatch(tmp_path):
    kernel = _opened(_shifted(tmp_path))
    kernel.max_interpret_s = 1e-6  # as at the real size: interpreting every program is refused
    with pytest.raises(UserError) as refused:
        kernel.trace()
    text = str(refused.value)
    assert "the spmv task's access model does not match it: program" in text and "x_ptr differs from the task " \
        "model's x_ptr: the kernel touches line" in text and "interpreting every one of its 3,000 programs" in text
    assert "\n" not in text
    # without the time limit the kernel is interpreted whole, and its trace says why the model was not used
    kernel.max_interpret_s = None
    how = kernel.trace().how
    assert how is not None and not how.model and "access model does not match it" in how.describe()


def _pairs() -> str:
    """The spmv fixture with two rows per program (a loop over the pair around its row body)."""
    code = (FIXTURES / "spmv_rows.py").read_text()
    head, rest = code.split("    pid = tl.program_id(0)\n")
    body, launch = rest.split("\n\n\ndef custom_kernel")
    looped = "\n".join("    " + line for line in body.replace("pid", "row").splitlines())
    assert "[(out.numel(),)]" in launch
    return (head + "    pid = tl.program_id(0)\n    for half in range(2):\n        row = pid * 2 + half\n" + looped
            + "\n\n\ndef custom_kernel" + launch.replace("[(out.numel(),)]", "[(out.numel() // 2,)]"))


def test_a_kernel_with_two_rows_per_program_is_not_the_models(tmp_path):
    """The model has a tile per row; this kernel's tile grid is rows / 2."""
    path = tmp_path / "spmv_pairs.py"
    path.write_text(_pairs())
    kernel = _opened(path)
    kernel.max_interpret_s = 1e-6
    with pytest.raises(UserError, match=r"access model does not match it: the task model's tile grid 3000 is not "
                                        r"the kernel's 1500\)"):
        kernel.trace()


@pytest.mark.slow
def test_the_attention_submission_is_predicted_to_gain_at_the_benchmark_case():
    """The m-block-major flash attention at the leaderboard's case (batch 4, heads 64, seq 8192): derived trace,
    and a head-major order predicted faster than the time model resolves."""
    task = load_task("flash_attention")
    case = dict(task.cases("benchmarks")[0])
    seed = int(case.pop("seed"))
    code = (FIXTURES / "attention_mblock.py").read_text()
    made = suggest(_ask("flash_attention", case, seed, 30.0), code, "attention_mblock.py",
                   Limits(compile_s=600, run_s=600), 3000, on_gpu=False)
    assert "trace derived from" in made.cases[0]["trace"], made.cases[0]["trace"]
    # Without a GPU measurement the time model ranks by DRAM traffic (its compute share unknown): the head-major
    # order cuts the predicted bytes ~30x, but the interval stays wide (compute may hide the traffic).
    assert made.outcome == "order" and made.best is not None and made.best.passed, made.headline
    assert made.best.predicted.speedup > 1.0 + made.cases[0]["noise"], made.best.predicted
