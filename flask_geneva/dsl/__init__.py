"""The workflow declaration DSL: steps, ordering, conditions (no database)."""
