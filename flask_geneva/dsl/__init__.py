"""The workflow declaration DSL: steps, ordering, conditions (pure code, no database)."""
