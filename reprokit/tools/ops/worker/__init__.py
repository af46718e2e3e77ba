"""The op sweep's worker side: what runs in the child (main.py) and imports torch, making and
judging samples. Nothing here imports the harness; a change to any file here invalidates the
sweep's cached verdicts (harness/sweep.py's SOURCES)."""
