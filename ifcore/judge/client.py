"""A judge client over any OpenAI-compatible endpoint (ScopeIF's judge is GPT-OSS-120B behind vLLM's API).

`JudgeClient(base_url, model, api_key)`, each falling back to IFCORE_JUDGE_URL / IFCORE_JUDGE_MODEL /
IFCORE_JUDGE_KEY (or OPENAI_API_KEY). `complete(prompt)` returns the judge's text; `complete_many(prompts)` runs
them with at most `concurrency` requests in flight (across all callers of one client) and keeps their order.
Connection errors, timeouts, 429 and 5xx are retried with exponential backoff (a Retry-After header wins when
larger); other 4xx are not. Replies are cached on disk under $IFCORE_CACHE/judge/, keyed by the sha256 of (model,
messages, sampling params): a re-run of a study sends no request. The key is never logged, cached or put in an
error message. `openai` is imported only when the first request is made, so `import ifcore.judge` stays light.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

_TRANSIENT_STATUS = {408, 409, 429}  # besides every 5xx, the statuses the OpenAI SDK itself retries


class JudgeError(RuntimeError):
    """A judge request that failed for good (after its retries, or at once on a non-transient error)."""


@dataclass
class JudgeSettings:
    base_url: str | None = None  # default $IFCORE_JUDGE_URL
    model: str | None = None  # default $IFCORE_JUDGE_MODEL
    api_key: str | None = field(default=None, repr=False)  # default $IFCORE_JUDGE_KEY, then $OPENAI_API_KEY
    concurrency: int = 8
    timeout: float = 120.0  # seconds per request
    retries: int = 3  # extra attempts after the first, transient errors only
    backoff: float = 1.0  # seconds before the first retry, doubled each time
    cache_dir: str | Path | None = None  # default $IFCORE_CACHE/judge
    cache: bool = True


class JudgeClient:
    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 **settings):
        s = JudgeSettings(base_url=base_url, model=model, api_key=api_key, **settings)
        s.base_url = s.base_url or os.environ.get("IFCORE_JUDGE_URL")
        s.model = s.model or os.environ.get("IFCORE_JUDGE_MODEL")
        s.api_key = s.api_key or os.environ.get("IFCORE_JUDGE_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        if not s.base_url or not s.model:
            raise ValueError("the judge needs a base URL and a model (arguments, or IFCORE_JUDGE_URL and "
                             "IFCORE_JUDGE_MODEL)")
        if s.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {s.concurrency}")
        cache_root = s.cache_dir or Path(os.environ.get("IFCORE_CACHE") or "~/.cache/ifcore").expanduser() / "judge"
        self.settings, self.cache_dir = s, Path(cache_root)
        self.requests = 0  # HTTP attempts made, retries included (tests and reports count them)
        self._slots = threading.BoundedSemaphore(s.concurrency)
        self._lock = threading.Lock()
        self._openai = None

    def __repr__(self) -> str:
        return f"JudgeClient({self.settings.base_url!r}, {self.settings.model!r})"

    def complete(self, prompt: str | list[dict], **params) -> str:
        """The judge's reply to `prompt` (a user message, or a list of chat messages); `params` are sampling
        parameters passed through (temperature defaults to 0, ScopeIF's greedy judge)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        params = {"temperature": 0.0, **params}
        key = hashlib.sha256(json.dumps([self.settings.model, messages, params], sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        path = self.cache_dir / key[:2] / f"{key}.json"
        if self.settings.cache:
            try:
                cached = json.loads(path.read_text(encoding="utf-8"))["text"]
                if isinstance(cached, str):
                    return cached
            except (OSError, ValueError, KeyError, TypeError):
                pass  # missing or corrupt: ask again and rewrite it
        with self._slots:
            text = self._request(messages, params)
        if self.settings.cache:
            self._store(path, {"model": self.settings.model, "params": params, "text": text})
        return text

    def complete_many(self, prompts: list, return_exceptions: bool = False, **params) -> list:
        """`complete` over many prompts, at most `concurrency` in flight, results in the prompts' order. With
        `return_exceptions`, a failed prompt yields its JudgeError in place instead of raising the first one."""
        def one(prompt):
            try:
                return self.complete(prompt, **params)
            except JudgeError as e:
                if return_exceptions:
                    return e
                raise
        if not prompts:
            return []
        with ThreadPoolExecutor(min(self.settings.concurrency, len(prompts))) as pool:
            return list(pool.map(one, prompts))

    def _client(self):
        with self._lock:
            if self._openai is None:
                import openai  # lazy: the judge's dependencies load only when a judge is really asked
                self._openai = openai.OpenAI(base_url=self.settings.base_url, api_key=self.settings.api_key,
                                             timeout=self.settings.timeout, max_retries=0)
            return self._openai

    def _request(self, messages: list[dict], params: dict) -> str:
        import openai
        client, s = self._client(), self.settings
        for attempt in range(s.retries + 1):
            with self._lock:
                self.requests += 1
            try:
                reply = client.chat.completions.create(model=s.model, messages=messages, **params)
                content = reply.choices[0].message.content
            except (openai.APIConnectionError, openai.APIStatusError) as e:  # timeouts are connection errors
                status = getattr(e, "status_code", None)
                transient = status is None or status >= 500 or status in _TRANSIENT_STATUS
                if not transient or attempt == s.retries:
                    tries = f"after {attempt + 1} attempts" if transient else "(not retried)"
                    raise JudgeError(self._scrub(f"judge request to {s.base_url} failed {tries}: "
                                                 f"{type(e).__name__}: {e}")) from None
                time.sleep(max(self._retry_after(e), s.backoff * 2 ** attempt * random.uniform(0.5, 1.0)))
                continue
            except (openai.APIError, AttributeError, IndexError, TypeError, ValueError) as e:  # a 200, not a chat reply
                raise JudgeError(self._scrub(f"judge at {s.base_url} sent a malformed reply: "
                                             f"{type(e).__name__}: {e}"[:500])) from None
            if not isinstance(content, str):
                raise JudgeError(f"judge at {s.base_url} sent no message content")
            return content
        raise AssertionError("unreachable")

    @staticmethod
    def _retry_after(error) -> float:
        response = getattr(error, "response", None)
        try:
            return min(float(response.headers.get("retry-after")), 60.0)
        except (AttributeError, TypeError, ValueError):
            return 0.0

    def _scrub(self, message: str) -> str:
        key = self.settings.api_key
        return message.replace(key, "***") if key and key != "EMPTY" else message

    @staticmethod
    def _store(path: Path, entry: dict) -> None:
        """Write-then-rename, so a reader never sees half an entry and a crash leaves no corrupt one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
