"""rsi: improve an agent model-harness pair generation by generation."""

__version__ = "0.1.0"
