"""``python -m brain.cli``."""

from brain.cli import main

main()
