"""Discover: generate candidate tasks, validate them, and admit those just beyond the generation."""
