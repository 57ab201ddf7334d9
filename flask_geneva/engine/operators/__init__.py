"""What acts on a workflow from outside its step: operators and housekeeping.

Resume, resume at, run now, recovery and finalize (the operators' actions, used
by the models, the CLI and the admin); the dispatcher's periodic pass;
housekeeping (cleanup, recovery of stuck executions, and of steps that ran past
their timeout through their exception policies, outcome roll-up) and the record
of the periodic runs.
"""
