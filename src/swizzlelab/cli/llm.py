"""CLI group `llm`: serve a local model (llama.cpp's server over a GGUF from PyPI part packages) for
`optimize --proposer llm`, and list the models it knows.
"""

from __future__ import annotations

import signal

import typer

from swizzlelab.cli.common import console
from swizzlelab.errors import UserError
from swizzlelab.optimize import local_llm

llm_app = typer.Typer(help="A local model for --proposer llm: serve one, list them (docs/llm.md).",
                      no_args_is_help=True)


@llm_app.command("models")
def models_cmd() -> None:
    """The local models, and whether their packages are installed."""
    out = console()
    for model in local_llm.MODELS.values():
        state = "installed" if local_llm.installed(model) else f"not installed ({local_llm.INSTALL_HINT})"
        default = " (default)" if model.name == local_llm.DEFAULT_MODEL else ""
        out.print(f"{model.name}{default}: {model.title}; {state}", highlight=False, markup=False)


@llm_app.command("serve")
def serve_cmd(
    model: str = typer.Option(local_llm.DEFAULT_MODEL, "--model", help=f"one of {', '.join(local_llm.MODELS)}"),
    port: int = typer.Option(8080, "--port", help="port on 127.0.0.1"),
    ctx: int = typer.Option(8192, "--ctx", help="context tokens (the prompt is kept near 4k)"),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads (default: all usable)"),
) -> None:
    """Serve a local model as an OpenAI endpoint until Ctrl-C; prints the settings `optimize` reads."""
    out = console()
    chosen = local_llm.get_model(model)
    out.print(f"assembling {chosen.title} (once; cached in {local_llm.cache_dir()}) ...", highlight=False, markup=False)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too, as Ctrl-C does
    proc = local_llm.start_server(chosen, port, ctx=ctx, threads=threads)
    out.print(
        f"serving {chosen.name} at {local_llm.endpoint(port)} (llama.cpp, pid {proc.pid}); in another shell:\n"
        f"  export OPENAI_BASE_URL={local_llm.endpoint(port)} SWIZZLELAB_LLM_MODEL={chosen.name} "
        "SWIZZLELAB_LLM_TIMEOUT_S=600\n"
        "  swizzlelab optimize transpose --target mi300x --proposer llm --budget 10\n"
        "Ctrl-C stops it.", highlight=False, markup=False)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        local_llm.stop_server(proc)
    if code:
        raise UserError(f"llama-server exited with code {code} while serving {chosen.name}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(app: typer.Typer) -> None:
    """Add the `llm` group to the main app."""
    app.add_typer(llm_app, name="llm")
