"""The transition table: every state change of a workflow or a step execution.

``table`` lists each transition once (who applies it, the states it may start
from, what it writes, what the caller schedules next); ``apply`` checks the
locked rows against an entry and writes it; ``types`` holds the entry's types.
"""
