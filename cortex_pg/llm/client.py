"""One client for OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, ...), JSON only.

Every call asks for a JSON object that must validate against a JSON schema (``jsonschema``)
and whose strings PostgreSQL text can hold (no NUL character, no lone surrogate: valid JSON
may spell both, ``"\\u0000"``, ``"\\ud800"``), and that passes the caller's own check (the
store's rules for the fields it writes); a timeout, a transport error, a non-JSON or invalid
answer raises :class:`LLMError` after ``max_retries`` further attempts. Callers catch it and
use their offline path, so an LLM failure (or an answer the store would refuse) never loses a
note or fails its job.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import jsonschema

from cortex_pg.errors import CortexPGError, ValidationError

log = logging.getLogger(__name__)

OLLAMA_DEFAULT = "http://localhost:11434"


class LLMError(CortexPGError):
    """The LLM could not give a valid answer (after retries)."""


def check_text(value: Any, field: str = "answer") -> None:
    """Check that every string in a parsed JSON answer (keys included) can be stored as
    PostgreSQL text (or jsonb): no NUL character and no lone surrogate.

    Raises:
        ValidationError: the first string that cannot, named by its path (e.g. ``tags[0]``).
    """
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError(field, "contains a NUL character (PostgreSQL text cannot hold it)")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(field, "is not valid Unicode (lone surrogate)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"{field} key")
            check_text(item, key if field == "answer" else f"{field}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_text(item, f"{field}[{i}]")


class LLMClient:
    """JSON-schema completions from an OpenAI-compatible endpoint.

    Args:
        model: chat model, e.g. ``gpt-4o-mini`` or an Ollama model name.
        api_key: key sent as a bearer token (Ollama ignores it).
        base_url: endpoint; None = the OpenAI API.
        timeout: seconds per request.
        max_retries: further attempts after a failed or invalid answer.
        temperature: sampling temperature.
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        temperature: float = 0.2,
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise CortexPGError(
                "the openai package is needed for LLM steps; pip install 'cortex-pg[openai]'"
            ) from exc
        self.model = model
        self.max_retries = max_retries
        self.temperature = temperature
        self._client = openai.OpenAI(
            api_key=api_key or "not-needed", base_url=base_url, timeout=timeout, max_retries=0
        )

    def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        name: str,
        check: Callable[[dict[str, Any]], object] | None = None,
    ) -> dict[str, Any]:
        """Ask for a JSON object matching ``schema``.

        An answer is invalid (logged, asked again, in the end :class:`LLMError`) when it is not
        JSON, does not match ``schema``, holds a string PostgreSQL text cannot hold
        (:func:`check_text`), or ``check`` raises :class:`~cortex_pg.errors.ValidationError`.

        Args:
            messages: chat messages (``role``/``content``).
            schema: JSON schema of the answer (an object schema).
            name: schema name sent with ``response_format``.
            check: called with the parsed answer; raises ValidationError when the answer breaks
                a rule of the store for the fields the caller writes (its return value unused).

        Returns:
            The parsed, validated object.

        Raises:
            LLMError: every attempt failed or gave an invalid answer.
        """
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    temperature=self.temperature,
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": name, "schema": schema, "strict": True},
                    },
                )
                text = resp.choices[0].message.content or ""
                data = json.loads(text)
                jsonschema.validate(data, schema)
                check_text(data)
                if check is not None:
                    check(data)
                return data
            except (json.JSONDecodeError, jsonschema.ValidationError, ValidationError) as exc:
                last = exc
                log.warning("LLM %s answer invalid (attempt %d): %s", name, attempt + 1, exc)
            except Exception as exc:  # noqa: BLE001 - transport errors of any kind
                last = exc
                log.warning("LLM %s call failed (attempt %d): %s", name, attempt + 1, exc)
        raise LLMError(f"LLM {name} failed after {self.max_retries + 1} attempts: {last}") from last


def llm_from_settings(
    backend: str = "openai",
    model: str = "gpt-4o-mini",
    api_key: str | None = None,
    base_url: str | None = None,
) -> LLMClient | None:
    """An LLMClient when one is configured, else None (offline).

    ``openai``: needs ``api_key`` or ``OPENAI_API_KEY`` (``base_url`` or ``OPENAI_BASE_URL`` optional).
    ``ollama``: the OpenAI-compatible endpoint at ``base_url`` or ``OLLAMA_HOST`` (default
    http://localhost:11434), path ``/v1``; no key needed.

    Raises:
        CortexPGError: unknown backend.
    """
    if backend == "openai":
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            return None
        return LLMClient(model, api_key=key, base_url=base_url or os.environ.get("OPENAI_BASE_URL"))
    if backend == "ollama":
        host = (base_url or os.environ.get("OLLAMA_HOST") or OLLAMA_DEFAULT).rstrip("/")
        if not host.startswith("http"):
            host = "http://" + host
        if not host.endswith("/v1"):
            host += "/v1"
        return LLMClient(model, api_key=api_key or "ollama", base_url=host)
    raise CortexPGError(f"llm_backend must be 'openai' or 'ollama', got {backend!r}")
