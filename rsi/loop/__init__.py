"""Orchestration of the phases: jobs, and later discover / expand / update / promote."""
