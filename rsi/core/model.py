"""The base of rsi's own pydantic models.

Every model builds its validator on first use rather than at import (`defer_build`): a command imports
dozens of models and uses a few (`rsi diff` none of the task or search ones), and building them all cost a
fifth of its start-up. Validation itself is the same.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RsiModel(BaseModel):
    model_config = ConfigDict(defer_build=True)
