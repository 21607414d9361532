"""Django admin lists every model; audit tables are read-only there."""

import pytest

from memory.writes import Actor, remember

pytestmark = pytest.mark.django_db

PAGES = [
    "memory/memory",
    "memory/memoryhistory",
    "memory/memorycold",
    "memory/embedding",
    "memory/entity",
    "memory/relation",
    "memory/memoryentitymention",
    "memory/job",
    "memory/apitoken",
    "pipeline/proposal",
    "pipeline/llmcall",
    "pipeline/configchange",
    "pipeline/pipelineconfig",
]


@pytest.mark.parametrize("page", PAGES)
def test_every_model_has_an_admin_list(admin_client, page):
    remember("Priya prefers squash merges", actor=Actor("t", "agent"))
    assert admin_client.get(f"/admin/{page}/").status_code == 200


def test_the_audit_trail_cannot_be_changed_or_deleted_in_the_admin(admin_client):
    memory = remember("Priya prefers squash merges", actor=Actor("t", "agent")).memory
    row = memory.history.get()
    assert admin_client.get("/admin/memory/memoryhistory/add/").status_code == 403
    response = admin_client.post(
        f"/admin/memory/memoryhistory/{row.pk}/change/", {"reason": "rewritten"}
    )
    assert response.status_code in (403, 200)
    row.refresh_from_db()
    assert row.reason == "remember"
    assert (
        admin_client.post(
            f"/admin/memory/memoryhistory/{row.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert memory.history.count() == 1


# --- Issue 10 item 14: memories are read-only in the admin -------------------------------------


def test_a_post_to_the_memory_change_page_changes_neither_content_nor_version(admin_client):
    memory = remember("Priya prefers squash merges", actor=Actor("t", "agent")).memory
    before = (memory.content, memory.version, memory.content_hash, memory.history.count())
    page = admin_client.get(f"/admin/memory/memory/{memory.pk}/change/")
    assert page.status_code == 200 and b'name="content"' not in page.content  # view only
    response = admin_client.post(
        f"/admin/memory/memory/{memory.pk}/change/",
        {"content": "Priya prefers merge commits", "type": memory.type, "who": "admin"},
    )
    assert response.status_code == 403
    memory.refresh_from_db()
    assert (memory.content, memory.version, memory.content_hash, memory.history.count()) == before
    assert admin_client.get("/admin/memory/memory/add/").status_code == 403
    deleting = admin_client.post(f"/admin/memory/memory/{memory.pk}/delete/", {"post": "yes"})
    assert deleting.status_code == 403
    assert type(memory).objects.filter(pk=memory.pk).exists()


# --- Issue 10 item 16: a member of the admin group manages users -------------------------------


def test_a_member_of_the_admin_group_manages_users_in_the_admin(admin_client_role, role_users):
    from django.contrib.auth.models import Group, User

    assert not role_users["admin"].is_staff
    assert admin_client_role.get("/admin/").status_code == 200
    assert admin_client_role.get("/admin/auth/user/").status_code == 200
    created = admin_client_role.post(
        "/admin/auth/user/add/",
        {
            "username": "newbie",
            "password1": "a long pass phrase",
            "password2": "a long pass phrase",
        },
    )
    assert created.status_code == 302, created.content
    newbie = User.objects.get(username="newbie")
    reviewer = Group.objects.get(name="reviewer")
    changed = admin_client_role.post(
        f"/admin/auth/user/{newbie.pk}/change/",
        {
            "username": "newbie",
            "is_active": "on",
            "is_superuser": "on",  # read-only for a non-superuser: ignored
            "groups": [reviewer.pk],
            "date_joined_0": "2025-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert changed.status_code == 302, changed.content
    newbie.refresh_from_db()
    assert list(newbie.groups.values_list("name", flat=True)) == ["reviewer"]
    assert newbie.is_superuser is False


def test_a_user_is_not_named_as_a_live_token_acts(admin_client_role, role_users):
    """A token without an owner counts in reviews under its name; a user created (or renamed)
    later under that name would be the token (the converse of create_api_token's check)."""
    from django.contrib.auth.models import User

    from api.auth import create_token

    create_token("deploy-bot", scopes=["review"])
    refused = admin_client_role.post(
        "/admin/auth/user/add/",
        {
            "username": "Deploy-Bot",
            "password1": "a long pass phrase",
            "password2": "a long pass phrase",
        },
    )
    assert refused.status_code == 200
    assert "An API token is named" in refused.content.decode()
    assert not User.objects.filter(username__iexact="deploy-bot").exists()
    newbie = User.objects.create_user("newbie", password="a long pass phrase")
    renamed = admin_client_role.post(
        f"/admin/auth/user/{newbie.pk}/change/",
        {
            "username": "deploy-bot",
            "is_active": "on",
            "date_joined_0": "2025-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert "An API token is named" in renamed.content.decode()
    assert User.objects.get(pk=newbie.pk).username == "newbie"


def test_a_token_holder_keeps_the_name_and_a_new_user_never_takes_a_holders_name(
    admin_client_role, role_users
):
    """Found by a QA pass: rita renamed rita2 approved first in the dashboard, and her token,
    still held by "rita", gave the second approval (two names, one person); a new user named
    rita would have reviewed as the old rita's tokens."""
    from django.contrib.auth.models import User

    from api.auth import create_token

    nadia = User.objects.create_user("nadia", password="a long pass phrase")
    create_token("nadia-cli", scopes=["ingest"], owner="nadia")
    form = {"is_active": "on", "date_joined_0": "2025-01-01", "date_joined_1": "00:00:00"}
    renamed = admin_client_role.post(
        f"/admin/auth/user/{nadia.pk}/change/", {**form, "username": "nadia2"}
    )
    assert "holds live API tokens (nadia-cli)" in renamed.content.decode()
    assert User.objects.get(pk=nadia.pk).username == "nadia"
    nadia.delete()  # deleted: her tokens stop working (test_token_lifecycle), their name stays
    added = admin_client_role.post(
        "/admin/auth/user/add/",
        {"username": "Nadia", "password1": "a long pass phrase", "password2": "a long pass phrase"},
    )
    assert "Live API tokens are held by &#x27;Nadia&#x27; (nadia-cli)" in added.content.decode()
    assert not User.objects.filter(username__iexact="nadia").exists()


def test_the_admin_group_cannot_touch_superusers_and_other_roles_stay_out(
    admin_client_role, reviewer_client
):
    from django.contrib.auth.models import User

    root = User.objects.create_superuser("root", password="root-password")
    assert (
        admin_client_role.post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert User.objects.filter(pk=root.pk).exists()
    assert reviewer_client.get("/admin/auth/user/").status_code == 302  # to the admin login


def test_a_member_of_the_admin_group_can_log_in_through_the_admin_login(role_users, client):
    response = client.post("/admin/login/?next=/admin/", {"username": "ada", "password": "pw-ada"})
    assert response.status_code == 302 and response.url == "/admin/"


def test_tokens_are_not_added_in_the_admin_where_they_would_have_no_hash(admin_client):
    """Found by a QA pass: the admin offered "Add api token", and saving it answered 500."""
    assert admin_client.get("/admin/memory/apitoken/add/").status_code == 403
    assert admin_client.get("/admin/memory/apitoken/").status_code == 200


def test_a_page_refused_without_a_role_named_says_so_plainly(client, django_user_model):
    """An admin-role user who is not a superuser opening the token list got "needs the  role"."""
    user = django_user_model.objects.create_user("plain", password="pw-plain-123", is_staff=True)
    client.force_login(user)
    page = client.get("/admin/memory/apitoken/")
    assert page.status_code == 403
    assert "needs the  role" not in page.content.decode()
    assert "may not open this page" in page.content.decode()
