"""Settings, read from the environment when a store is opened (never at import time).

Environment variables:
    DATABASE_URL: an external PostgreSQL (>= 15, pgvector >= 0.7); unset -> embedded server.
    CORTEX_PG_HOME: directory of the embedded server's data (default: the platform user-data dir).
    CORTEX_PG_EMBEDDER: ``minilm`` (default), ``openai`` or ``hashing``.
    CORTEX_PG_STM_CAPACITY: notes kept in short-term memory per (user_id, session_id), default 20.
    OPENAI_API_KEY / OPENAI_BASE_URL: for the OpenAI embedder.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_USER_ID = "default"
DEFAULT_SESSION_ID = "default"
SCHEMA = "cortex"


class Settings(BaseSettings):
    """cortex-pg settings; every field can be set by an environment variable (see module doc)."""

    model_config = SettingsConfigDict(env_prefix="CORTEX_PG_", extra="ignore")

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "CORTEX_PG_DATABASE_URL")
    )
    home: Path | None = None
    embedder: str = "minilm"
    stm_capacity: int = Field(default=20, ge=1)
    openai_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "CORTEX_PG_OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL", "CORTEX_PG_OPENAI_BASE_URL")
    )

    def data_dir(self, path: str | Path | None = None) -> Path:
        """Directory of the embedded server: ``path``, else ``CORTEX_PG_HOME``, else the user-data dir."""
        if path is not None:
            return Path(path).expanduser().resolve()
        if self.home is not None:
            return self.home.expanduser().resolve()
        return Path(platformdirs.user_data_dir("cortex-pg", appauthor=False)).resolve()
