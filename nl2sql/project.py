"""A project's configuration as the engine loads it: `nl2sql.yaml` read and validated by `nl2sql.config`, then
checked against everything the engine knows that the config package does not (the adapters and the SQL guard,
the price table, the hook and observer registries), every problem reported at once."""

from __future__ import annotations

from pathlib import Path

from nl2sql.config import Config, load_config
from nl2sql.config.load import ConfigCheck
from nl2sql.datasources.config_checks import check_datasources
from nl2sql.hooks.config_checks import check_hooks
from nl2sql.llm.config_checks import check_prices
from nl2sql.observers.config_checks import check_observers

#: The checks of every project, in the order their problems are listed.
PROJECT_CHECKS: tuple[ConfigCheck, ...] = (check_datasources, check_prices, check_hooks, check_observers)


def load_project(path: str | Path) -> Config:
    """Read, validate and check a project's configuration; raise ConfigError listing every problem."""
    return load_config(path, checks=PROJECT_CHECKS)
