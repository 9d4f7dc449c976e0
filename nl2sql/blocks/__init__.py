"""Prefect Blocks holding secrets the configuration may name instead of writing them down.

`datasources[i].block: NAME` reads the URL from a saved DatasourceBlock; an LLMBlock holds a
model endpoint and its key. Secrets are SecretStr: masked in the Prefect API, logs, errors and repr.
"""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

from nl2sql.errors import DatasourceError


class DatasourceBlock(Block):
    """A datasource's SQLAlchemy URL (with its password), kept as a secret."""

    _block_type_name = "nl2sql Datasource"
    _block_type_slug = "nl2sql-datasource"
    _description = "The SQLAlchemy URL of a database nl2sql may query (read-only), kept secret."

    url: SecretStr = Field(description="SQLAlchemy URL, e.g. postgresql+psycopg://reader:secret@db:5432/sales")


class LLMBlock(Block):
    """A model endpoint: provider wire, model name, base URL and API key."""

    _block_type_name = "nl2sql LLM"
    _block_type_slug = "nl2sql-llm"
    _description = "A model endpoint for nl2sql: provider, model, base URL and API key (kept secret)."

    provider: str = Field(description="'openai' (any OpenAI-compatible server) or 'anthropic'.")
    model: str = Field(description="The model name the endpoint expects.")
    base_url: str | None = Field(default=None, description="Endpoint URL for OpenAI-compatible servers.")
    api_key: SecretStr | None = Field(default=None, description="The API key.")


def load_datasource_url(name: str) -> str:
    """The URL held by the saved DatasourceBlock `name` (DatasourceError when there is none)."""
    try:
        block = DatasourceBlock.load(name)
    except ValueError as exc:
        raise DatasourceError(
            f"No saved DatasourceBlock named '{name}'.",
            fix=f"Save one with `nl2sql datasources save-block {name} --url-env VAR`, or write the url in nl2sql.yaml.",
        ) from exc
    return block.url.get_secret_value()


def load_llm_block(name: str) -> tuple[str, str, str | None, str | None]:
    """(provider, model, base_url, api_key) of the saved LLMBlock `name` (LLMError when there is none)."""
    from nl2sql.llm.models import LLMError

    try:
        block = LLMBlock.load(name)
    except ValueError as exc:
        raise LLMError(f"No saved LLMBlock named '{name}'.",
                       fix="Save one from Python: LLMBlock(provider=..., model=..., api_key=...).save(NAME), "
                       "or configure the model in nl2sql.yaml.") from exc
    return block.provider, block.model, block.base_url, block.api_key.get_secret_value() if block.api_key else None


def save_datasource_block(name: str, url: str, *, overwrite: bool = False) -> None:
    """Save a DatasourceBlock holding `url` under `name`."""
    DatasourceBlock(url=SecretStr(url)).save(name, overwrite=overwrite)
