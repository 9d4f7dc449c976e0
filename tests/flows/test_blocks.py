"""DatasourceBlock: the config may name a saved block instead of writing a URL; the secret never shows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.datasources import DatasourceCatalog
from nl2sql.errors import DatasourceError
from nl2sql.project import load_project

pytestmark = pytest.mark.prefect


def test_block_round_trip_and_secret_masking(prefect_server: None, chinook_path: Path) -> None:
    from nl2sql.blocks import DatasourceBlock, load_datasource_url, save_datasource_block

    secret_url = f"sqlite:///{chinook_path}?password=hunter2"
    save_datasource_block("chinook-test", secret_url, overwrite=True)
    block = DatasourceBlock.load("chinook-test")
    assert "hunter2" not in repr(block) and "hunter2" not in str(block.model_dump())
    assert load_datasource_url("chinook-test") == secret_url
    with pytest.raises(DatasourceError, match="No saved DatasourceBlock named 'nope'"):
        load_datasource_url("nope")


def test_config_names_a_block(prefect_server: None, chinook_path: Path, tmp_path: Path) -> None:
    from nl2sql.blocks import load_datasource_url, save_datasource_block

    save_datasource_block("music", f"sqlite:///{chinook_path}", overwrite=True)
    path = tmp_path / "nl2sql.yaml"
    path.write_text(yaml.safe_dump({
        "datasources": [{"id": "music", "block": "music"}],
        "policies": {"default_role": "admin", "roles": {"admin": {}}},
    }))
    config = load_project(path)
    assert "block" in repr(config.datasources[0]) and config.datasources[0].url is None
    with DatasourceCatalog(config, block_loader=load_datasource_url) as catalog:
        result = catalog.get("music").execute("SELECT COUNT(*) AS n FROM Genre")
    assert int(result.frame.iloc[0]["n"]) == 25
    with DatasourceCatalog(config) as catalog, pytest.raises(DatasourceError, match="cannot be loaded here"):
        catalog.get("music")


def test_llm_block_feeds_the_client(prefect_server: None) -> None:
    from pydantic import SecretStr

    from nl2sql.blocks import LLMBlock, load_llm_block
    from nl2sql.config.models import LLMConfig, ModelConfig
    from nl2sql.llm import LLMClient, LLMError, Message
    from nl2sql.llm.fake import FakeLLMServer

    with FakeLLMServer() as server:
        LLMBlock(provider="openai", model="fake-model", base_url=server.base_url,
                 api_key=SecretStr("sk-hidden")).save("fake-llm", overwrite=True)
        assert "sk-hidden" not in repr(LLMBlock.load("fake-llm"))
        config = LLMConfig(models={"main": ModelConfig(provider="openai", model="placeholder", block="fake-llm")},
                           default="main")
        server.answer("text", "hi from the block's model")
        client = LLMClient(config, block_loader=load_llm_block)
        assert client.text("planner", [Message("user", "hello")]) == "hi from the block's model"
        assert server.requests[-1]["model"] == "fake-model"
    with pytest.raises(LLMError, match="No saved LLMBlock named 'missing'"):
        load_llm_block("missing")
