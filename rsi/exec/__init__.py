"""Executors: where trial logic runs. `local` runs N trials at a time in this process."""
