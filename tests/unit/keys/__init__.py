"""Unit tests of trioproxy.keys: limits, records, the store (SQLite and PostgreSQL) and the service."""
