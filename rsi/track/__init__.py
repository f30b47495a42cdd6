"""Trackers: a cycle's params, per-step metrics, tags and artifacts in MLflow, TensorBoard or W&B (DESIGN §13).

One small interface (`Tracker`, rsi.track.base) with a fake beside it; the integrations are optional extras
(`rsi[mlflow]`, `rsi[tensorboard]`, `rsi[wandb]`) chosen by name from `TRACKERS`; `TrackingSession` sends to
any subset on a background thread, so a slow or failing tracker never fails or slows the loop."""
