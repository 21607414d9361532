"""Pipeline config: the effective mode, validated and audited changes, the command and the API."""

import getpass
import itertools
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from pipeline.config import ConfigError, config_json, effective_mode, get_config
from pipeline.models import ConfigChange, PipelineConfig
from pipeline.writes.config import update_config

# enabled, shadowMode, mutationsFrozen, allowUpdateDelete -> mode (DESIGN §5).
MODE_TABLE = [
    (False, False, False, False, "disabled"),
    (False, False, False, True, "disabled"),
    (False, False, True, False, "disabled"),
    (False, False, True, True, "disabled"),
    (False, True, False, False, "disabled"),
    (False, True, False, True, "disabled"),
    (False, True, True, False, "disabled"),
    (False, True, True, True, "disabled"),
    (True, False, False, False, "controlled-write"),
    (True, False, False, True, "full"),
    (True, False, True, False, "shadow"),
    (True, False, True, True, "shadow"),
    (True, True, False, False, "shadow"),
    (True, True, False, True, "shadow"),
    (True, True, True, False, "shadow"),
    (True, True, True, True, "shadow"),
]


def test_the_mode_table_covers_all_sixteen_flag_combinations():
    combos = {row[:4] for row in MODE_TABLE}
    assert combos == set(itertools.product([False, True], repeat=4))


@pytest.mark.parametrize("enabled,shadow,frozen,allow,mode", MODE_TABLE)
def test_effective_mode(enabled, shadow, frozen, allow, mode):
    assert (
        effective_mode(
            enabled=enabled,
            shadow_mode=shadow,
            mutations_frozen=frozen,
            allow_update_delete=allow,
        )
        == mode
    )


@pytest.mark.django_db
@pytest.mark.parametrize("enabled,shadow,frozen,allow,mode", MODE_TABLE)
def test_autonomous_flags_never_change_the_mode(enabled, shadow, frozen, allow, mode):
    for autonomous_enabled, autonomous_frozen in itertools.product([False, True], repeat=2):
        update_config(
            {
                "enabled": enabled,
                "shadowMode": shadow,
                "mutationsFrozen": frozen,
                "allowUpdateDelete": allow,
                "autonomous": {"enabled": autonomous_enabled, "frozen": autonomous_frozen},
            },
            changed_by="test",
            reason="mode table",
        )
        assert config_json(get_config())["mode"] == mode


@pytest.mark.django_db
def test_a_fresh_install_is_in_shadow_mode_from_the_data_migration():
    row = PipelineConfig.objects.get(pk=1)  # written by the migration, not by get_config()
    assert row.enabled and row.shadow_mode
    assert not row.allow_update_delete and not row.mutations_frozen
    assert config_json(row)["mode"] == "shadow"
    assert row.min_fact_confidence_for_write == 0.7
    assert (row.search_alpha, row.search_min_score) == (0.7, 0.1)


@pytest.mark.django_db
def test_update_config_saves_the_row_and_logs_before_after_reason_and_who():
    saved = update_config(
        {"shadowMode": False, "search": {"alpha": 0.5}},
        changed_by="ada",
        reason="go controlled-write",
    )
    assert saved["mode"] == "controlled-write" and saved["search"]["alpha"] == 0.5
    row = get_config()
    assert row.shadow_mode is False and row.search_alpha == 0.5
    change = ConfigChange.objects.get()
    assert change.changed_by == "ada" and change.reason == "go controlled-write"
    assert change.before["shadowMode"] is True and change.before["mode"] == "shadow"
    assert change.after["shadowMode"] is False and change.after["mode"] == "controlled-write"
    assert change.before["search"]["alpha"] == 0.7 and change.after["search"]["alpha"] == 0.5


@pytest.mark.django_db
@pytest.mark.parametrize(
    "changes",
    [
        {"enabled": 1},
        {"enabled": "maybe"},
        # JSON's own values only (a QA pass: "yes" pulled the brake; the command line's text is
        # read by pipeline.config.from_text).
        {"mutationsFrozen": "yes"},
        {"enabled": "off"},
        {"search": {"alpha": "0.5"}},
        {"shadowMode": None},
        {"search": {"alpha": "high"}},
        {"search": {"alpha": 1.5}},
        {"search": {"minScore": -0.1}},
        {"minFactConfidenceForWrite": True},
        {"autonomous": {"intervalMinutes": 0}},
        {"autonomous": {"intervalMinutes": 2.5}},
        {"jobs": {"maxAttempts": 99}},
        {"turbo": True},
        {"search": {"beta": 0.3}},
        {"autonomous": "on"},
        {},
        # One bad key spoils the whole change: the good key is not saved either.
        {"shadowMode": False, "allowUpdateDelete": "definitely"},
    ],
)
def test_update_config_rejects_bad_changes_and_saves_nothing(changes):
    before = config_json(get_config())
    with pytest.raises(ConfigError):
        update_config(changes, changed_by="ada", reason="try")
    assert config_json(get_config()) == before
    assert not ConfigChange.objects.exists()


@pytest.mark.django_db
def test_a_lease_shorter_than_one_attempts_model_calls_is_refused(settings):
    """Found by a QA pass: a 30 s lease was saved while a model call may take 90; the sweep then
    took live jobs back from their workers, whose results were thrown away."""
    settings.MEMORY_LLM_TIMEOUT_SECONDS, settings.MEMORY_EMBED_TIMEOUT_SECONDS = 90, 30
    with pytest.raises(ConfigError, match="must be at least 210 s"):
        update_config({"jobs": {"leaseTimeoutSeconds": 209}}, changed_by="ada", reason="short")
    update_config({"jobs": {"leaseTimeoutSeconds": 210}}, changed_by="ada", reason="enough")
    assert get_config().lease_timeout_seconds == 210
    settings.MEMORY_LLM_TIMEOUT_SECONDS, settings.MEMORY_EMBED_TIMEOUT_SECONDS = 5, 5
    update_config({"jobs": {"leaseTimeoutSeconds": 30}}, changed_by="ada", reason="fast model")
    assert get_config().lease_timeout_seconds == 30


@pytest.mark.django_db
def test_update_config_requires_a_reason():
    with pytest.raises(ConfigError, match="reason"):
        update_config({"shadowMode": False}, changed_by="ada", reason="  ")
    assert get_config().shadow_mode is True and not ConfigChange.objects.exists()


# --- manage.py pipeline_config ------------------------------------------------------------------


def run_command(*args) -> str:
    out = StringIO()
    call_command("pipeline_config", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_command_shows_every_setting_and_the_mode():
    output = run_command()
    lines = dict(line.split(None, 1) for line in output.strip().splitlines())
    assert lines["enabled"] == "true" and lines["shadowMode"] == "true"
    assert lines["search.alpha"] == "0.7" and lines["autonomous.intervalMinutes"] == "30"
    assert lines["mode"] == "shadow"
    from pipeline.config import FIELDS

    assert set(FIELDS) | {"mode"} == set(lines)


@pytest.mark.django_db
def test_the_command_sets_values_with_a_reason_and_logs_them():
    output = run_command(
        "--set",
        "shadowMode=false",
        "--set",
        "search.alpha=0.5",
        "--reason",
        "roll out controlled-write",
    )
    assert "shadow -> controlled-write" in output
    config = get_config()
    assert config.shadow_mode is False and config.search_alpha == 0.5
    change = ConfigChange.objects.get()
    # Who: the operating system's user (a QA pass: every change read "manage.py"), or --by.
    assert change.changed_by == f"{getpass.getuser()} (manage.py pipeline_config)"
    assert change.reason == "roll out controlled-write"
    assert change.after["mode"] == "controlled-write"
    shown = json.loads(run_command("--json"))
    assert shown["mode"] == "controlled-write" and shown["search"]["alpha"] == 0.5
    run_command("--set", "search.alpha=0.6", "--reason", "tune", "--by", "ada")
    assert ConfigChange.objects.latest("changed_at").changed_by == "ada"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "shadowMode=false"], "--reason"),
        (["--set", "shadowMode=false", "--reason", " "], "--reason"),
        (["--set", "shadowMode", "--reason", "x"], "key=value"),
        (["--set", "turbo=true", "--reason", "x"], "unknown setting"),
        (["--set", "search.alpha=2", "--reason", "x"], "between"),
    ],
)
def test_the_command_refuses_bad_sets_and_changes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        run_command(*args)
    assert get_config().shadow_mode is True and get_config().search_alpha == 0.7
    assert not ConfigChange.objects.exists()


# --- GET/PATCH /api/pipeline/config -------------------------------------------------------------

URL = "/api/pipeline/config"


def patch(client, body, auth):
    return client.patch(URL, json.dumps(body), content_type="application/json", **auth)


def test_the_config_api_needs_the_admin_scope(client, ingest_auth, review_auth):
    for auth in (ingest_auth, review_auth):
        assert client.get(URL, **auth).status_code == 403
        response = patch(client, {"shadowMode": False, "reason": "sneaky"}, auth)
        assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert client.get(URL).status_code == 401
    assert get_config().shadow_mode is True and not ConfigChange.objects.exists()


def test_get_returns_the_flags_and_the_mode(client, admin_auth):
    body = client.get(URL, **admin_auth).json()
    assert body["mode"] == "shadow"
    assert body["enabled"] is True and body["shadowMode"] is True
    assert body["allowUpdateDelete"] is False and body["mutationsFrozen"] is False
    assert body["minFactConfidenceForWrite"] == 0.7
    assert set(body["autonomous"]) >= {"enabled", "frozen", "intervalMinutes"}
    assert (body["search"]["alpha"], body["search"]["minScore"]) == (0.7, 0.1)


def test_a_token_bound_to_one_agent_may_read_the_config_but_not_change_it(client, admin_auth):
    before = client.get(URL, **admin_auth).json()
    response = patch(client, {"shadowMode": False, "reason": "go"}, admin_auth)
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert "governs every agent's pipeline" in response.json()["message"]
    assert client.get(URL, **admin_auth).json() == before
    assert not ConfigChange.objects.exists()


def test_patch_takes_partial_nested_keys_and_returns_the_whole_object(client, multi_admin):
    response = patch(
        client, {"autonomous": {"enabled": False}, "reason": "quiet week"}, multi_admin
    )
    assert response.status_code == 200
    body = response.json()
    assert body["autonomous"]["enabled"] is False
    assert body["autonomous"]["intervalMinutes"] == 30  # untouched siblings stay
    assert body["mode"] == "shadow" and body["shadowMode"] is True
    assert body["updatedAt"].endswith("Z")  # as every moment of the API (it was "+00:00")
    change = ConfigChange.objects.get()
    assert (change.changed_by, change.reason) == ("ops-admin", "quiet week")

    response = patch(
        client, {"shadowMode": False, "allowUpdateDelete": True, "reason": "go"}, multi_admin
    )
    assert response.status_code == 200 and response.json()["mode"] == "full"


def test_patch_accepts_a_round_trip_of_get(client, multi_admin):
    body = client.get(URL, **multi_admin).json()
    body.update(shadowMode=False, reason="edit what GET returned")
    response = patch(client, body, multi_admin)
    assert response.status_code == 200, response.json()
    assert response.json()["mode"] == "controlled-write"


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("full", 'for "full" set shadowMode false and allowUpdateDelete true'),
        ("disabled", 'for "disabled" set enabled false'),
        ("turbo", "set enabled, shadowMode and allowUpdateDelete instead"),
        (["full"], "set enabled, shadowMode and allowUpdateDelete instead"),  # not a 500
    ],
)
def test_patch_of_another_mode_says_which_flags_make_it_and_saves_nothing(
    client, multi_admin, mode, says
):
    """`mode` is derived: sent alone, another one is refused with the flags that make it (the
    refusal said no setting was given); beside settings it is ignored (below)."""
    response = patch(client, {"mode": mode, "reason": "switch"}, multi_admin)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "mode is read-only" in response.json()["message"] and says in response.json()["message"]
    assert get_config().shadow_mode is True and not ConfigChange.objects.exists()


@pytest.mark.parametrize(
    "body,code",
    [
        ({"shadowMode": False}, "reason_required"),
        ({"shadowMode": False, "reason": "  "}, "reason_required"),
        ({"shadowMode": "nope", "reason": "x"}, "invalid_request"),
        ({"search": {"alpha": 3}, "reason": "x"}, "invalid_request"),
        ({"autonomous": {"turbo": True}, "reason": "x"}, "invalid_request"),
        ({"turbo": True, "reason": "x"}, "invalid_request"),
        ({"reason": "nothing to change"}, "invalid_request"),
    ],
)
def test_patch_rejects_bad_bodies_with_400_and_saves_nothing(client, multi_admin, body, code):
    response = patch(client, body, multi_admin)
    assert response.status_code == 400
    assert response.json()["error"] == code
    assert get_config().shadow_mode is True and not ConfigChange.objects.exists()


def test_patch_ignores_the_derived_mode(client, multi_admin):
    response = patch(client, {"mode": "full", "enabled": True, "reason": "x"}, multi_admin)
    assert response.status_code == 200 and response.json()["mode"] == "shadow"


@pytest.mark.django_db
def test_enabling_the_pipeline_hands_the_jobs_that_waited_to_the_workers_oldest_first():
    """Found by a QA pass: jobs that waited while the pipeline was disabled ran only when the
    sweep took them for lost hand-offs (5 quiet minutes later), after newer memories."""
    from django_q.models import OrmQ

    from pipeline.review import update_config as save
    from tests.pipeline_support import raw

    save({"enabled": False}, changed_by="ada", reason="pause")
    first, second = raw("Kenji owns the billing API.").job, raw("Priya runs the rota.").job
    OrmQ.objects.all().delete()  # the remember's hand-offs, which a worker skipped while disabled
    save({"search": {"alpha": 0.6}}, changed_by="ada", reason="tune")  # no switch: nothing
    assert not OrmQ.objects.exists()
    save({"enabled": True}, changed_by="ada", reason="resume")
    queued = [q.task["args"] for q in OrmQ.objects.order_by("id")]
    assert [list(args) for args in queued] == [[first.id], [second.id]]


def test_a_command_run_by_a_user_the_system_cannot_name_is_by_the_command(monkeypatch):
    """Found by a second review: a container's uid with no passwd entry made getpass fail with a
    traceback, for a change that only needed a name for its log."""
    from pipeline.management.who import command_user

    def nameless():
        raise KeyError("getpwuid(): uid not found: 54321")

    monkeypatch.setattr(getpass, "getuser", nameless)
    assert command_user("pipeline_config") == "manage.py pipeline_config"
    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    assert command_user("purge") == "alice (manage.py purge)"


@pytest.mark.django_db
def test_the_command_turning_the_pipeline_on_hands_the_waiting_jobs_over():
    """Found by a second review: the command saved through the write module, which hands nothing
    over; the docs say turning the pipeline on does, whichever way it is done."""
    from django_q.models import OrmQ

    from tests.pipeline_support import raw

    run_command("--set", "enabled=false", "--reason", "pause")
    job = raw("Kenji owns the billing API.").job
    OrmQ.objects.all().delete()
    run_command("--set", "enabled=true", "--reason", "resume")
    assert [list(q.task["args"]) for q in OrmQ.objects.all()] == [[job.id]]
