"""The store's two engines as one fixture: ``store_location`` is a SQLite file or a fresh PostgreSQL database."""

from __future__ import annotations

import pytest

from tests.postgres_helpers import postgres_cluster, postgres_url  # noqa: F401 - fixtures


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "keys.db")
    return request.getfixturevalue("postgres_url")
