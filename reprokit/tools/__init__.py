"""The tools built on the pipeline: capture, minimize, merge, bisect, wrap."""
