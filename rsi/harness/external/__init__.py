"""External agent harnesses (`kind: external` configs): a published agent program run unmodified against the
trial's sandbox and the trial's recording gateway. `base.py` is the part every program shares (gateway session,
limits, trajectory from the records); one module per program (`mini_swe.py`) registers its runner."""

from rsi.harness.external.base import load_runners, run_external
from rsi.harness.external.runner import RUNNERS, ExternalResult, ExternalRun, ExternalRunner

__all__ = ["RUNNERS", "ExternalResult", "ExternalRun", "ExternalRunner", "load_runners", "run_external"]
