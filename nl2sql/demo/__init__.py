"""The demo project: the vendored Chinook database and two generated ones (support, webanalytics)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from nl2sql.errors import NL2SQLError

DEMO_DIR = Path(str(files("nl2sql.demo")))
CHINOOK = DEMO_DIR / "chinook.sqlite"
CHINOOK_SHA256 = "479757c1ef8408fe23a4e1a478fc3ecc1929c21a98bc1fe66d758ffd8ea85120"
CONFIG_TEMPLATE = DEMO_DIR / "nl2sql.yaml"


def chinook_customers(path: Path = CHINOOK) -> list[tuple[int, str]]:
    """Chinook's customers as (CustomerId, Country), the ids the generated databases refer to."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        return [(int(i), str(c)) for i, c in conn.execute("SELECT CustomerId, Country FROM Customer ORDER BY 1")]
    finally:
        conn.close()


def init_demo(target: Path, *, force: bool = False, env: Mapping[str, str] | None = None) -> Path:
    """Write the demo project into `target`: nl2sql.yaml and data/ with three databases, and a model when the
    environment (`env`, default os.environ) names one. Returns the config path."""
    from nl2sql.demo.support import write_support
    from nl2sql.demo.webanalytics import write_webanalytics

    config = target / "nl2sql.yaml"
    if config.exists() and not force:
        raise NL2SQLError(
            f"{config} already exists.", fix="Pass --force to overwrite the demo project, or choose another folder."
        )
    data = target / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CHINOOK, data / "chinook.sqlite")
    customers = chinook_customers()
    write_support(data / "support.sqlite", customers)
    write_webanalytics(data / "webanalytics.duckdb", customers)
    text = CONFIG_TEMPLATE.read_text()
    section = demo_llm_section(os.environ if env is None else env)
    config.write_text(text + ("\n" + section if section else ""))
    return config


def demo_llm_section(env: Mapping[str, str]) -> str | None:
    """An `llm:` section for the demo from the environment (keys stay `${env:…}` references, never values):
    a local OpenAI-compatible server (NL2SQL_LLM_BASE_URL and NL2SQL_LLM_MODEL), else an OpenAI key, else an
    Anthropic key; None when there is no model to use."""
    if env.get("NL2SQL_LLM_BASE_URL") and env.get("NL2SQL_LLM_MODEL"):
        model, body = env["NL2SQL_LLM_MODEL"], (
            f"provider: openai, base_url: '{env['NL2SQL_LLM_BASE_URL']}', model: '{env['NL2SQL_LLM_MODEL']}', "
            "timeout_s: 300")
        prices = f"\n  prices:\n    '{model}': {{input: 0, output: 0}}"
    elif env.get("OPENAI_API_KEY"):
        body, prices = "provider: openai, model: gpt-4o-mini, api_key: '${env:OPENAI_API_KEY}'", ""
    elif env.get("ANTHROPIC_API_KEY"):
        body, prices = "provider: anthropic, model: claude-haiku-4-5, api_key: '${env:ANTHROPIC_API_KEY}'", ""
    else:
        return None
    return ("# A model for free-form questions, found in the environment when the demo was written.\n"
            f"llm:\n  models:\n    main: {{{body}}}\n  default: main{prices}\n")
