"""Persistence: the workspace's files and its SQLite database. Only this package writes SQL."""
