"""Django admin for the store. Memories and the audit tables (history, cold tier, proposals, call
log, config) are read-only here: memories change only through the dashboard's and the API's
audited writes, which keep the history, the version and the content hash in step."""

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.contrib.auth.models import User

from memory.models import (
    ApiToken,
    Embedding,
    Entity,
    Job,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
)
from memory.reviewer_names import check_rename, check_user_name
from memory.roles import ADMIN, has_role
from pipeline import approvals
from pipeline.models import ConfigChange, LlmCall, PipelineConfig, Proposal
from pipeline.team import DigestRun, SavedQueue


class ReadOnlyAdmin(admin.ModelAdmin):
    """The audit trail is append-only: nobody edits or deletes it, not even superusers."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Memory)
class MemoryAdmin(ReadOnlyAdmin):
    """View only: an edit here would write no history row and leave version and hash stale."""

    list_display = (
        "short_content",
        "type",
        "who",
        "agent_id",
        "pinned",
        "is_deleted",
        "version",
        "created_at",
    )
    list_filter = ("type", "agent_id", "pinned", "is_deleted", "source_type", "extraction_status")
    search_fields = ("content", "id", "who")

    @admin.display(description="content")
    def short_content(self, obj):
        return obj.content[:100]


@admin.register(MemoryHistory)
class MemoryHistoryAdmin(ReadOnlyAdmin):
    list_display = ("memory_id", "event", "changed_by", "actor_type", "reason", "created_at")
    list_filter = ("event", "actor_type")
    search_fields = ("memory__id", "changed_by", "reason")


@admin.register(MemoryCold)
class MemoryColdAdmin(ReadOnlyAdmin):
    list_display = ("memory_id", "archived_reason", "version", "archived_at")
    list_filter = ("archived_reason",)


@admin.register(Embedding)
class EmbeddingAdmin(admin.ModelAdmin):
    list_display = ("id", "content_hash", "model", "dimensions", "source_memory_id", "created_at")
    list_filter = ("model", "dimensions")
    exclude = ("vector",)
    readonly_fields = ("content_hash", "model", "dimensions", "source_memory", "created_at")


@admin.register(Entity)
class EntityAdmin(admin.ModelAdmin):
    list_display = ("name", "entity_type", "agent_id", "mentions", "updated_at")
    list_filter = ("entity_type", "agent_id")
    search_fields = ("name", "canonical_name")


@admin.register(Relation)
class RelationAdmin(admin.ModelAdmin):
    list_display = ("source", "relation_type", "target", "confidence", "mentions")
    search_fields = ("relation_type", "source__name", "target__name")


@admin.register(MemoryEntityMention)
class MentionAdmin(admin.ModelAdmin):
    list_display = ("entity", "memory_id", "mention_text", "confidence", "created_at")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "job_type",
        "status",
        "attempts",
        "max_attempts",
        "created_at",
        "updated_at",
    )
    list_filter = ("status", "job_type")
    readonly_fields = ("result",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created with `manage.py create_api_token` and revoked with `revoke_api_token`;
    the list shows when each was last used (to the minute), when it expires and its state."""

    list_display = (
        "name",
        "owner",
        "prefix",
        "agent_id",
        "scopes",
        "state",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = ("revoked",)
    # Its name and owner are who its changes are by: set at creation, where they are checked.
    readonly_fields = ("name", "owner", "token_hash", "prefix", "created_at", "last_used_at")

    @admin.display(description="state")
    def state(self, obj):
        return "revoked" if obj.revoked else "expired" if obj.expired() else "active"

    def has_add_permission(self, request):
        # A row added here would hold no token hash (the command makes and shows the token).
        return False


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyAdmin):
    list_display = (
        "action",
        "status",
        "fact_content",
        "review_needed",
        "model",
        "decided_by",
        "created_at",
    )
    list_filter = ("status", "action", "review_needed", "model")
    search_fields = ("fact_content", "id", "source_memory__id")


@admin.register(LlmCall)
class LlmCallAdmin(ReadOnlyAdmin):
    list_display = ("kind", "model", "provider", "duration_ms", "error", "created_at")
    list_filter = ("kind", "model", "provider")


@admin.register(ConfigChange)
class ConfigChangeAdmin(ReadOnlyAdmin):
    list_display = ("changed_by", "changed_at", "reason")


@admin.register(PipelineConfig)
class PipelineConfigAdmin(ReadOnlyAdmin):
    """Flags change on the Settings page, which previews the effect and logs the change."""

    list_display = ("__str__", "enabled", "shadow_mode", "allow_update_delete", "mutations_frozen")


admin.site.unregister(User)


def _not_a_tokens_name(username: str) -> str:
    """The username, as a form's clean step wants it, unless memory.reviewer_names refuses it."""
    try:
        check_user_name(username)
    except ValueError as refused:
        raise forms.ValidationError(str(refused)) from None
    return username


class NamedUserCreationForm(AdminUserCreationForm):
    def clean_username(self):
        return _not_a_tokens_name(super().clean_username())


class NamedUserChangeForm(UserChangeForm):
    def clean_username(self):
        username = self.cleaned_data["username"]
        if self.instance.pk and username == self.instance.username:
            return username  # unchanged: not a new name
        if self.instance.pk:
            try:
                check_rename(self.instance.username)
                approvals.check_rename(self.instance.username)
            except ValueError as refused:
                raise forms.ValidationError(str(refused)) from None
        return _not_a_tokens_name(username)


@admin.register(User)
class RoleUserAdmin(UserAdmin):
    """Members of the admin role manage users, but only a superuser makes or edits a superuser;
    a user is not named as a live API token acts (NamedUserCreationForm, NamedUserChangeForm)."""

    add_form = NamedUserCreationForm
    form = NamedUserChangeForm

    def get_readonly_fields(self, request, obj=None):
        fields = tuple(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += ("is_superuser", "user_permissions")
        return fields

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)


class RoleAdminEdits(admin.ModelAdmin):
    """Members of the admin role edit these (the queues are not part of the audit trail)."""

    def has_module_permission(self, request):
        return has_role(request.user, ADMIN)

    def has_view_permission(self, request, obj=None):
        return has_role(request.user, ADMIN)

    has_add_permission = has_module_permission

    def has_change_permission(self, request, obj=None):
        return has_role(request.user, ADMIN)

    has_delete_permission = has_change_permission


@admin.register(SavedQueue)
class SavedQueueAdmin(RoleAdminEdits):
    list_display = ("name", "filters", "position")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("reviewers",)


@admin.register(DigestRun)
class DigestRunAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "stale", "email_status", "webhook_status", "webhook_error")
