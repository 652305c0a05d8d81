"""The bundled catalog of popular models' shapes, by Hugging Face hub id (``tltcore/data/model_catalog.json``).

``--model Qwen/Qwen3-30B-A3B`` works offline: each entry holds only the architecture fields of the
model's ``config.json`` (what decides inference cost), with the file's address (``source``), the model's
licence and where the values were checked, and is read by :mod:`tltcore.model_config` exactly like a
downloaded file -- so a catalog entry and the real ``config.json`` give the same shape (the tests pin
that for the files in ``tests/data/model_configs``). A name resolves by its hub id, case-insensitive,
or by the part after the slash when only one entry has it (``Qwen3-30B-A3B``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from tltcore.errors import InputError
from tltcore.model_config import ModelConfig

CATALOG_FILE = "data/model_catalog.json"


@dataclass(frozen=True)
class CatalogModel:
    """One catalog entry: the hub id, where its ``config.json`` lives, its licence, where the values
    were checked, and the architecture fields (a ``config.json`` object)."""

    hub_id: str
    source: str
    license: str
    checked: str
    fields: dict[str, Any]

    @property
    def name(self) -> str:
        """The shape's name in outputs: the hub id's model part (``Qwen3-30B-A3B``)."""
        return self.hub_id.rsplit("/", 1)[-1]

    def model_config(self) -> ModelConfig:
        """The entry read by the one config reader."""
        return ModelConfig.from_dict(self.fields, path=f"model catalog entry {self.hub_id}")


@cache
def catalog() -> dict[str, CatalogModel]:
    """Every entry, by hub id (the file's order)."""
    path = resources.files("tltcore").joinpath(CATALOG_FILE)
    raw = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for hub_id, entry in raw["models"].items():
        if not (isinstance(entry, dict) and str(entry.get("source", "")).startswith("https://")
                and entry.get("license") and entry.get("checked") and isinstance(entry.get("config"), dict)):
            raise InputError("needs source (https://...), license, checked and config", path=path, field=hub_id)
        out[hub_id] = CatalogModel(hub_id, entry["source"], entry["license"], entry["checked"], entry["config"])
    return out


def find(name: str) -> CatalogModel | None:
    """The entry called ``name``: its hub id (case-insensitive), or its model part when unique."""
    key = name.strip().lower()
    by_id = {k.lower(): m for k, m in catalog().items()}
    if key in by_id:
        return by_id[key]
    tails = [m for m in catalog().values() if m.name.lower() == key]
    return tails[0] if len(tails) == 1 else None


__all__ = ["CATALOG_FILE", "CatalogModel", "catalog", "find"]
