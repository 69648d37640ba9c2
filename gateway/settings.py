"""The model gateway's settings: the chain of OpenAI-compatible providers (``[[llm.providers]]``,
or the one-provider shortcut ``CITEWISE_LLM_BASE_URL``) and how calls to them are retried,
bounded and broken off (see ``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from citewise.errors import ConfigError
from citewise.settings import ConfigTable, SettingsPart, from_table


class ProviderConfig(BaseModel):
    """A ``[[llm.providers]]`` entry: one OpenAI-compatible endpoint in the model gateway's
    chain. The key is never in the file: ``api_key_env`` names the variable that holds it."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    base_url: str = Field(description="e.g. http://vllm:8000/v1 or http://localhost:11434/v1")
    model: str
    api_key_env: str | None = Field(default=None, description="Env variable with the key.")
    input_price: float = Field(default=0.0, ge=0, description="Per million prompt tokens.")
    output_price: float = Field(default=0.0, ge=0, description="Per million output tokens.")
    timeout: float = Field(default=30.0, gt=0, description="Seconds for one call.")
    max_concurrency: int = Field(default=8, ge=1, description="Calls in flight at once.")
    stream_usage: bool = Field(
        default=True, description="Ask for usage on the last streamed chunk "
        "(stream_options.include_usage); turn off for servers that reject the field.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL ending in /v1")
        return v.rstrip("/")


class GatewaySettings(SettingsPart):
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API base (vLLM, Ollama, Workers AI); unset = extractive.",
    )
    llm_model: str | None = Field(default=None, description="Model name for the LLM endpoint.")
    llm_api_key: str | None = Field(default=None, description="Bearer token for the LLM endpoint.")
    llm_timeout: float = Field(
        default=60.0, gt=0, description="Seconds one model call may take (the one-provider "
        "shortcut; [[llm.providers]] set their own).")
    llm_input_price: float = Field(
        default=0.0, ge=0, description="Price per million prompt tokens (one-provider shortcut).")
    llm_output_price: float = Field(
        default=0.0, ge=0, description="Price per million output tokens (one-provider shortcut).")
    llm_deadline: float = Field(
        default=90.0, gt=0, description="Seconds an answer may spend on models, retries and "
        "failovers included; then the extractive answer is returned.")
    llm_max_attempts: int = Field(
        default=4, ge=1, le=20, description="Model calls per answer, over all providers.")
    llm_breaker_failures: int = Field(
        default=5, ge=1, description="Consecutive failures that open a provider's breaker.")
    llm_breaker_reset: float = Field(
        default=30.0, gt=0, description="Seconds an open breaker waits before a probe call.")
    llm_providers: list[ProviderConfig] = from_table("[[llm.providers]]", list)


def _read_llm(table: Any, path: Path) -> dict[str, Any]:
    llm = {} if table is None else table
    if not isinstance(llm, dict) or set(llm) - {"providers"}:
        raise ConfigError(f"config file {path}: [llm] only holds [[llm.providers]]",
                          hint="see citewise.example.toml")
    return {"llm_providers": [ProviderConfig(**p) for p in llm.get("providers", [])]}


PROVIDERS_TABLE = ConfigTable("llm", "[[llm.providers]]", _read_llm)
