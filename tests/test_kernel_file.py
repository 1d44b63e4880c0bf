"""One path for a --kernel file: userkernel.load_kernel_file imports every kind, KernelFile.is_task_kernel (what the
module defines, not what its text mentions) routes it, and Task and UserTask both answer tasks.KernelTask."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.runtime import ensure_triton_backend
from swizzlelab.tasks import KernelTask, Task, load_task
from swizzlelab.userkernel import Inputs, load_kernel_file, open_user_kernel, parse_tensor_spec, split_kernel_spec
from swizzlelab.userkernel.task import UserTask

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"
H100 = get_model("h100")
# A kernel file as people write it whose text names the functions of a task kernel module without defining them:
# searching the text for them took it for one.
MENTIONS = '"""Not a task kernel: it has no `def custom_kernel(data)` and no `def tile_grid(...)`."""\n'


def _matmul_copy(tmp_path: Path) -> Path:
    from swizzlelab.tasks.matmul import kernel as matmul_kernel

    mine = tmp_path / "my_matmul.py"
    shutil.copy(matmul_kernel.__file__, mine)
    return mine


def _row_sum_mentioning(tmp_path: Path) -> Path:
    path = tmp_path / "row_sum_mentions.py"
    path.write_text(MENTIONS + (WILD / "row_sum.py").read_text())
    return path


def test_one_loader_tells_a_task_kernel_module_from_a_file_as_people_write_it(tmp_path: Path) -> None:
    assert load_kernel_file(_matmul_copy(tmp_path), H100).is_task_kernel
    assert not load_kernel_file(WILD / "row_sum.py", H100).is_task_kernel
    mentions = load_kernel_file(_row_sum_mentioning(tmp_path), H100)
    assert "def custom_kernel" in mentions.module_source and "def tile_grid" in mentions.module_source
    assert not mentions.is_task_kernel


def test_kernel_spec_splits_file_and_kernel() -> None:
    assert split_kernel_spec("a/k.py:matmul_kernel") == ("a/k.py", "matmul_kernel")
    assert split_kernel_spec("a/k.py") == ("a/k.py", "")
    assert split_kernel_spec("C:/k.py") == ("C:/k.py", "")


def _row_sum():
    return open_user_kernel(str(WILD / "row_sum.py"), H100,
                            inputs=Inputs(tensors=(parse_tensor_spec("x=float32[R,C]"),), sizes={"R": 64, "C": 256}))


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(KernelTask).items()
            if inspect.isfunction(member) and not name.startswith("_")}


def test_task_and_user_task_answer_the_kernel_task_protocol() -> None:
    tasks = [load_task("matmul"), UserTask(_row_sum(), rank=1)]
    methods = _protocol_methods()
    assert set(methods) == {"case_label", "parse_order", "generate_input", "custom_kernel", "check"}
    for task in tasks:
        assert isinstance(task, KernelTask), type(task).__name__
        for name, wanted in methods.items():
            got = inspect.signature(getattr(type(task), name))
            # the protocol's parameters in order, its defaults kept (an implementation may add defaults and
            # further parameters that have one; a static method has no `self`)
            want = [p for p in wanted.parameters.values() if p.name != "self"]
            have = [p for p in got.parameters.values() if p.name != "self"]
            where = (type(task).__name__, name, str(got), str(wanted))
            assert [p.name for p in have[: len(want)]] == [p.name for p in want], where
            assert all(w.default is inspect.Parameter.empty or h.default == w.default for w, h in zip(want, have)), where
            assert all(p.default is not inspect.Parameter.empty for p in have[len(want):]), where
    assert isinstance(tasks[0], Task) and not isinstance(tasks[1], Task)


def test_user_task_refuses_another_configuration() -> None:
    user_kernel = _row_sum()
    task = UserTask(user_kernel, rank=1)
    data = task.generate_input()
    out = task.custom_kernel(data, None, user_kernel.choice)
    assert task.check(data, out).ok
    with pytest.raises(UserError, match="configuration it was opened with"):
        task.custom_kernel(task.generate_input(), None, object())


def test_cli_routes_by_what_the_file_defines(tmp_path: Path) -> None:
    from swizzlelab.cli.main import app

    runner = CliRunner()
    task_style = runner.invoke(app, ["simulate", "matmul", "--kernel", str(_matmul_copy(tmp_path)), "--size",
                                     "m=256", "--size", "n=256", "--size", "k=64", "--order", "column_major"])
    assert task_style.exit_code == 0, task_style.output
    assert "task matmul m=256 n=256 k=64" in task_style.output and "predicted (model H100-SXM)" in task_style.output
    wild = runner.invoke(app, ["simulate", "--kernel", str(_row_sum_mentioning(tmp_path)), "--tensor",
                               "x=float32[R,C]", "--size", "R=64", "--size", "C=256", "--order", "stride:STRIDE=4"])
    assert wild.exit_code == 0, wild.output
    assert "row_sum_mentions:row_sum_kernel" in wild.output


def test_eval_names_the_submission_argument_for_a_task_kernel_module(tmp_path: Path) -> None:
    from swizzlelab.cli.main import app

    mine = _matmul_copy(tmp_path)
    result = CliRunner().invoke(app, ["eval", "matmul", "--kernel", str(mine)])
    assert result.exit_code != 0 and isinstance(result.exception, UserError)
    assert "evaluate it as the SUBMISSION argument" in str(result.exception) and "\n" not in str(result.exception)


def test_a_wrapper_given_a_sparse_csr_tensor_is_evaluated(tmp_path: Path) -> None:
    """The spmv task's inputs hold a torch.sparse_csr tensor beside its dense parts: telling which inputs the
    kernel writes compared it as a dense one and crashed (seen on an H100 as `optimize spmv --kernel`)."""
    from swizzlelab.cli.main import app

    args = ["eval", "spmv", "--kernel", str(Path(__file__).parent / "fixtures" / "suggest" / "spmv_rows.py"),
            "--launch", "custom_kernel", "--size", "rows=256", "--size", "communities=4", "--mode", "test"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "passed" in result.output and "csr=256x33554432" in result.output
