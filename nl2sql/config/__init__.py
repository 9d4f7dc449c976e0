"""Configuration: the models of `nl2sql.yaml`, loading with includes and `${env:VAR}`, and ConfigError."""

from __future__ import annotations

import os
from pathlib import Path

from nl2sql.config.load import check_config, load_config
from nl2sql.config.models import (
    Config,
    DatasourceConfig,
    LLMConfig,
    ModelConfig,
    PoliciesConfig,
    RoleConfig,
    Settings,
)

DEFAULT_CONFIG_NAME = "nl2sql.yaml"


def config_path(explicit: str | Path | None = None) -> Path:
    """Where the configuration is: the explicit path, else $NL2SQL_CONFIG, else ./nl2sql.yaml."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("NL2SQL_CONFIG")
    return Path(env) if env else Path(DEFAULT_CONFIG_NAME)


__all__ = [
    "DEFAULT_CONFIG_NAME",
    "Config",
    "DatasourceConfig",
    "LLMConfig",
    "ModelConfig",
    "PoliciesConfig",
    "RoleConfig",
    "Settings",
    "check_config",
    "config_path",
    "load_config",
]
