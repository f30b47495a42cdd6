"""Cycle: discover, expand, update and promote chained into one resumable job (and the demo)."""
