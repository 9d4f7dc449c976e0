"""Opening the configured datasources: URL or saved block → the dialect's read-only adapter."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from nl2sql.adapters import adapter_class
from nl2sql.config.models import Config, DatasourceConfig, ResourceSettings
from nl2sql.datasources.base import Adapter
from nl2sql.errors import DatasourceError

#: Turns a block name into the SQLAlchemy URL it holds (the Prefect block loader, in practice).
BlockLoader = Callable[[str], str]


def datasource_url(ds: DatasourceConfig, block_loader: BlockLoader | None = None) -> str:
    """The datasource's URL, read from its block when it names one."""
    if ds.url is not None:
        return ds.url.get_secret_value()
    if block_loader is None:
        raise DatasourceError(
            f"Datasource '{ds.id}' keeps its URL in block '{ds.block}', which cannot be loaded here.",
            fix="Run through the nl2sql CLI or flows (they load blocks), or write the url in nl2sql.yaml.",
            datasource=ds.id,
        )
    return block_loader(ds.block or "")


def open_adapter(ds: DatasourceConfig, *, base_dir: Path, block_loader: BlockLoader | None = None,
                 resources: ResourceSettings | None = None) -> Adapter:
    """The read-only adapter for one configured datasource (connections open on first use)."""
    url = datasource_url(ds, block_loader)
    try:
        backend = sa.make_url(url).get_backend_name()
    except sa.exc.ArgumentError as exc:
        raise DatasourceError(f"Datasource '{ds.id}' has a malformed URL.", fix="Check its url or block.",
                              datasource=ds.id) from exc
    return adapter_class(backend)(ds.id, url, schemas=ds.schemas, base_dir=base_dir, resources=resources,
                                  max_result_bytes=ds.max_result_bytes)


class DatasourceCatalog:
    """The configured datasources, each opened once on first use and closed together."""

    def __init__(self, config: Config, *, block_loader: BlockLoader | None = None) -> None:
        self.config = config
        self.block_loader = block_loader
        self._adapters: dict[str, Adapter] = {}
        self._lock = threading.Lock()

    @property
    def ids(self) -> list[str]:
        """Datasource ids in configuration order."""
        return [ds.id for ds in self.config.datasources]

    def get(self, datasource_id: str) -> Adapter:
        """The adapter of one datasource (UnknownNameError for an unknown id)."""
        with self._lock:  # sub-queries open adapters from several threads
            if datasource_id not in self._adapters:
                ds = self.config.datasource(datasource_id)
                self._adapters[datasource_id] = open_adapter(ds, base_dir=self.config.base_dir,
                                                             block_loader=self.block_loader,
                                                             resources=self.config.settings.resources)
            return self._adapters[datasource_id]

    def close(self) -> None:
        """Dispose of every opened engine."""
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()

    def __enter__(self) -> DatasourceCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
