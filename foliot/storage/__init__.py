"""Durable storage: the `Store` protocol and its SQLite and PostgreSQL backends."""
