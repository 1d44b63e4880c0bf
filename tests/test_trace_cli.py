"""The `swizzlelab trace` command, registered on a bare typer app (the main CLI registers it the same way)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from swizzlelab.errors import UserError
from swizzlelab.trace import AccessTrace
from swizzlelab.cli import trace as trace_cli
from swizzlelab.scenario import pick_case
from swizzlelab.tasks import load_task


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test app"""

    trace_cli.register(app)
    return app


def test_model_summary_and_saved_trace(app, tmp_path):
    out = tmp_path / "mm.npz"
    result = CliRunner().invoke(app, ["trace", "matmul", "--case", "test:1", "--config", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "analytic model" in result.output and "a_ptr" in result.output
    trace = AccessTrace.load(out)
    # m=64 n=32 k=16, 16^3 fp16 tiles: 4 x 2 tiles of 1 step. A block: 16 rows x 32 B contiguous = 4 lines;
    # B and C blocks: 16 rows x 32 B at a 64 B stride = 8 lines each
    assert trace.grid == (4, 2) and trace.n_accesses == 8 * (4 + 8 + 8)


def test_traced_trace(app, tmp_path):
    out = tmp_path / "t.npz"
    result = CliRunner().invoke(app, ["trace", "transpose", "--traced", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "traced" in result.output and AccessTrace.load(out).meta["source"] == "traced"


def test_bad_case_is_a_user_error(app):
    result = CliRunner().invoke(app, ["trace", "matmul", "--case", "bench:9"])
    assert isinstance(result.exception, UserError) and "pick bench:0 to bench:2" in str(result.exception)
    result = CliRunner().invoke(app, ["trace", "matmul", "--case", "test:99"])
    assert "pick test:0 to test:3" in str(result.exception) and "tests:" not in str(result.exception)
    with pytest.raises(UserError, match="test:N or bench:N"):
        pick_case(load_task("matmul"), "first")
