"""`rsi view`: a read-only local web viewer over the workspace (FastAPI + jinja2, server-rendered)."""
