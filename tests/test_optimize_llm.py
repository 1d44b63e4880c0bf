"""The LLM proposer against a local OpenAI-compatible server with scripted replies (http.server in a thread)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from swizzlelab.errors import UserError
from swizzlelab.optimize import Options, run
from swizzlelab.scenario import load_scenario
from swizzlelab.optimize.llm import LlmConfig, extract_formula, sections
from swizzlelab.optimize.records import DUPLICATE, EVALUATED, NO_FORMULA, NOT_BIJECTIVE
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
    """Answers POST /v1/chat/completions with the next scripted reply and keeps the request bodies."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                text = outer.replies.pop(0) if outer.replies else "no more replies"
                payload = json.dumps({
                    "choices": [{"message": {"role": "assistant", "content": text}}],
                    "usage": {"total_tokens": 1000 + len(text)},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

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

    result = run(problem, Options(out_dir=tmp_path, budget=6, proposer="llm", llm=config, screen_s=30),
                 measurer=None, on_note=notes.append, on_iteration=on_iteration)
    attempts = result.state.attempts
    assert [a.status for a in attempts[1:5]] == [EVALUATED, NOT_BIJECTIVE, DUPLICATE, NO_FORMULA]
    assert all(a.proposer == "llm" for a in attempts[1:5])
    assert attempts[1].summary == "Group two rows of tiles."
    assert attempts[2].prediction is None and attempts[2].proof.n_missing > 0
    assert attempts[3].duplicate_of == 1
    assert "no ```python block" in attempts[4].message
    # After the server died: said once, then the search proposer carries on to the budget.
    assert [a.proposer for a in attempts[5:]] == ["search", "search"]
    down = [n for n in notes if "unreachable" in n]
    assert len(down) == 1 and "continuing with the search proposer" in down[0]
    # Each request carried the kernel source, the memory analysis and the history so far, with the key.
    assert len(server.requests) == 4
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[0]["auth"] == "Bearer k123"
    first = server.requests[0]["body"]["messages"][1]["content"]
    assert "def matmul_kernel" in first and "Best hit rate any order could reach" in first
    assert "num_pid_m=8" in first
    last = server.requests[3]["body"]["messages"][1]["content"]
    assert "iteration 2 [not_bijective]" in last and "iteration 3 [duplicate]" in last
    log = (tmp_path / "log.txt").read_text()
    assert "Proposer: llm (llm scripted reply 1)" in log
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
