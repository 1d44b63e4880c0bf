"""An HTTP client of the leaderboard API (httpx), used by `swizzlelab submit` and `submission ...`, and by the admin
commands (`user`, `token`, `leaderboard`) with --server; every failure becomes a one-line UserError.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from swizzlelab.errors import UserError

DEFAULT_SERVER = "http://127.0.0.1:8000"
# SubmissionStatus.FINISHED, spelled out: the client must not import the database models (start-up time).
FINISHED = ("done", "error", "cancelled")


@dataclass
class Client:
    server: str
    token: str | None = None
    timeout_s: float = 30.0

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        url = self.server.rstrip("/") + path
        try:
            response = httpx.request(method, url, headers=headers, timeout=self.timeout_s, **kwargs)
        except httpx.HTTPError as err:
            raise UserError(f"cannot reach the leaderboard server at {self.server}: {type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else 'no answer'} (start it with `swizzlelab serve`, "
                            "or give --server URL)") from None
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", ""))
            except ValueError:
                detail = response.text[:200]
            retry = response.headers.get("retry-after")
            hint = f" (retry after {retry} s)" if retry and response.status_code == 429 else ""
            raise UserError(f"server answered {response.status_code}: {detail.splitlines()[0] if detail else '-'}{hint}")
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.content

    def get(self, path: str) -> Any:
        return self._request("GET", path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("POST", path, json=body)

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("PUT", path, json=body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("PATCH", path, json=body)

    def submit(self, task: str, gpu_type: str, mode: str, code: str, filename: str) -> dict[str, Any]:
        return self.post("/api/submissions", {"task": task, "gpu_type": gpu_type, "mode": mode, "code": code,
                                              "filename": filename})

    def wait(self, submission_id: int, on_update: Callable[[dict[str, Any]], None] | None = None,
             poll_s: float = 0.5, timeout_s: float | None = None) -> dict[str, Any]:
        """Poll until the submission is finished; UserError after timeout_s."""
        start = time.monotonic()
        while True:
            view = self.get(f"/api/submissions/{submission_id}")
            if on_update is not None:
                on_update(view)
            if view["status"] in FINISHED:
                return view
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise UserError(f"submission {submission_id} still {view['status']} after {timeout_s:.0f} s; "
                                f"check later with the API: GET /api/submissions/{submission_id}")
            time.sleep(poll_s)
