"""Promote: gate a candidate against its parent on the sealed holdout and the regression suites."""
