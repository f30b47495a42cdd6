"""Expand: run the train tasks, attribute every failure by re-running, and search harness-config fixes."""
