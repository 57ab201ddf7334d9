"""The "new deploy" of tests/worker/test_deploy_worker.py, loaded by the worker only.

The test process defines the old class with the same ``__geneva_type__``; the
worker (``--include tests.worker.deploy_new_code``) runs this one, in which
``charge_card`` was removed and ``email_receipt`` renamed (issue 19).
"""

from __future__ import annotations

from flask_geneva import step
from tests.apps import basic


class NewDeployedSignup(basic.geneva.Workflow):
    """The signup after the deploy."""

    __geneva_type__ = "DeployedSignup"

    @step
    def create_account(self):
        self.hero.counter += 1

    step.removed("charge_card")

    @step
    def send_receipt(self):
        self.hero.counter += 1000

    step.renamed("email_receipt", to="send_receipt")

    @step
    def welcome(self):
        self.hero.counter += 10000
