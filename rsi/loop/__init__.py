"""Orchestration of the loop: one package per phase, plus what the phases share.

`discover/` makes and admits tasks, `expand/` runs them and searches configs, `update/` trains a candidate,
`promote/` gates it, `cycle/` chains the phases (and the demo). Shared across phases: `context` (what a
phase runs with), `run` (jobs and trials), `stages`, `arms`, `hooks`, `suites`, `init`, `doctor`.
"""
