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
