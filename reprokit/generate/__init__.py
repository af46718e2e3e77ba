"""Generate: case files and templates, rendered into standalone scripts."""
