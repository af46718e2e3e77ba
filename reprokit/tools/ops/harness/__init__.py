"""The op sweep's harness, in reprokit's own process and torch-free: the tasks and their cache,
the workers started and fed (through runner/processes), their answers read as groups, stale
graphs and triggers, repros written and run alone, ops.json and the report. It never imports
the worker's side (tests/test_layout.py)."""
