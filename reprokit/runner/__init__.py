"""Run: every variant's stages in fresh processes, scheduled in DAG order, many at once."""
