"""``python -m reprokit``."""

from reprokit.cli import main

main()
