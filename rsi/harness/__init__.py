"""The harness: what turns model output into actions in a sandbox (and the built-in agents)."""
