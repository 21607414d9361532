"""ensure_admin: the first user's password box names the address the dashboard really serves on."""

from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("", "http://127.0.0.1:8000/"),
        ("10.0.0.5:8080", "http://10.0.0.5:8080/"),
        ("0.0.0.0:9000", "http://<this machine's address>:9000/"),
    ],
)
def test_the_password_box_names_the_bind_address(monkeypatch, bind, url):
    monkeypatch.setenv("MEMORY_BIND", bind)
    out = StringIO()
    call_command("ensure_admin", stdout=out)
    assert f"Log in at {url} with" in out.getvalue()
    call_command("ensure_admin", stdout=(again := StringIO()))
    assert again.getvalue() == ""  # once only


def test_the_first_admin_steps_over_a_live_tokens_name():
    """A token named admin (without an owner) acts in reviews as admin; the first user must not
    be that token, and `make run` must still start: the user becomes admin-2."""
    from django.contrib.auth import get_user_model

    from api.auth import create_token

    create_token("Admin", scopes=["review"])
    call_command("ensure_admin", stdout=(out := StringIO()))
    assert "username: admin-2\n" in out.getvalue()
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["admin-2"]


def test_createsuperuser_refuses_a_live_tokens_name_and_creates_nothing():
    from django.contrib.auth import get_user_model
    from django.core.management.base import CommandError

    from api.auth import create_token, revoke

    create_token("deploy-bot", scopes=["review"])
    create_token("rita", scopes=["review"])
    revoke("rita")
    with pytest.raises(CommandError, match="An API token is named 'Deploy-Bot'"):
        call_command(
            "createsuperuser", username="Deploy-Bot", email="", interactive=False, verbosity=0
        )
    assert not get_user_model().objects.exists()
    # A revoked token's name is free.
    call_command("createsuperuser", username="rita", email="", interactive=False, verbosity=0)
    assert get_user_model().objects.get().username == "rita"
