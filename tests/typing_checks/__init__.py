"""Files that mypy checks and pytest never runs (docs: Typing)."""
