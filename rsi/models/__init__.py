"""Model access: the OpenAI-compatible client (all model traffic) and the embedded local server.

`client` and `embedded` import no torch; `server` (the embedded server) needs the `model` extra.
"""
