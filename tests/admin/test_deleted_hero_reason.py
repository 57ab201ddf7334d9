"""The workflow page says why a deleted hero canceled the workflow (R-HERO-07)."""

from __future__ import annotations

from flask_geneva.testing import perform_next_step
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db


def test_the_workflow_page_shows_why_a_deleted_hero_canceled_it(client):
    """The canceled execution's timeline row names the deleted hero and the class
    (R-HERO-07, R-EXE-13)."""
    hero = new_user("deleted@example.com")
    workflow = AdminTwoStep.create(hero=hero)
    hero_id = hero.id
    db.session.delete(hero)
    db.session.commit()
    perform_next_step(workflow)
    page = client.get(detail_url(workflow.id))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert (
        f"hero User#{hero_id} no longer exists: the workflow is canceled "
        "(AdminTwoStep does not set may_proceed_without_hero, R-EXE-13)"
    ) in text
