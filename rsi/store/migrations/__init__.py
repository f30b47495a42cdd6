"""Alembic migrations for the rsi database, run programmatically (no alembic.ini)."""
