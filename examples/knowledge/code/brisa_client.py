"""Minimal Python client for the Brisa users service (see users_service.brisa).

Only the standard library is used so the module can be dropped into cron jobs and
maintenance scripts without a virtualenv.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

RETRYABLE_STATUSES = {429, 502, 503, 504}


class BrisaApiError(Exception):
    """Raised when the service answers with a non-2xx status."""

    def __init__(self, status: int, message: str, request_id: Optional[str] = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.request_id = request_id


def build_auth_header(api_key: str) -> dict[str, str]:
    """Header the rate limiter uses to identify the caller."""
    return {"X-Api-Key": api_key}


def parse_error_body(raw: bytes) -> str:
    """Extract the human-readable message from a Brisa error response body."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw[:200].decode("utf-8", errors="replace")
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return json.dumps(body)[:200]


def retry_with_backoff(call: Callable[[], T], attempts: int = 4, base_delay: float = 0.5) -> T:
    """Call `call`, retrying on throttling and gateway errors with jittered backoff.

    Only wrap idempotent requests (GET, DELETE); a retried POST could create duplicates.
    """
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except BrisaApiError as err:
            if err.status not in RETRYABLE_STATUSES or attempt == attempts:
                raise
            delay = base_delay * (2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
            time.sleep(delay)
    raise AssertionError("unreachable")


@dataclass
class User:
    id: int
    email: str
    display_name: str
    active: bool

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "User":
        # the service also returns created_at, which this client ignores
        return cls(row["id"], row["email"], row["display_name"], row["active"])


class BrisaClient:
    def __init__(self, base_url: str, api_key: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.headers = {"Accept": "application/json", **build_auth_header(api_key)}
        self.timeout = timeout

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None
        headers = dict(self.headers)
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raise BrisaApiError(exc.code, parse_error_body(exc.read()), exc.headers.get("X-Request-Id"))

    def health_check(self) -> bool:
        try:
            self._request("GET", "/_brisa/ready")
            return True
        except (BrisaApiError, urllib.error.URLError):
            return False

    def get_user(self, user_id: int) -> Optional[User]:
        try:
            return User.from_row(retry_with_backoff(lambda: self._request("GET", f"/users/{user_id}")))
        except BrisaApiError as err:
            if err.status == 404:
                return None
            raise

    def list_users(self, page: int = 1, size: int = 20, active: Optional[bool] = None) -> list[User]:
        query = f"?page={page}&size={size}"
        if active is not None:
            query += f"&active={'true' if active else 'false'}"
        rows = retry_with_backoff(lambda: self._request("GET", "/users" + query))
        return [User.from_row(r) for r in rows]

    def create_user(self, email: str, display_name: str, password: str) -> User:
        body = {"email": email, "display_name": display_name, "password": password}
        row = self._request("POST", "/users", body)  # not retried: POST is not idempotent
        return User.from_row(row)

    def deactivate_user(self, user_id: int) -> None:
        self._request("DELETE", f"/users/{user_id}")


if __name__ == "__main__":
    client = BrisaClient("http://localhost:8080", api_key="dev-key")
    print("ready:", client.health_check())
    for user in client.list_users(active=True):
        print(user.id, user.display_name)
