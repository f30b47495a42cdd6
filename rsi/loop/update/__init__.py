"""Update: turn accepted trajectories into a dataset, train, and register a candidate generation."""
