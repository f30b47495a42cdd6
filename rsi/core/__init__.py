"""Pure domain layer: pydantic models, rules and statistics. No I/O lives here."""
