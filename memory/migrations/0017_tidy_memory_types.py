"""Data: memory types as remember and an edit store them since the blank-type fix: without
surrounding blanks, and `fact` for a type of nothing visible (stored as written before it, such a
memory was found by no type filter). Reads the few distinct types, not the rows; running it again
changes nothing."""

from django.db import migrations

from memory.content import is_effectively_empty


def tidy_types(apps, schema_editor=None) -> dict[str, str]:
    """Rewrite every stored type that is padded or blank; returns old -> new."""
    Memory = apps.get_model("memory", "Memory")
    changed = {}
    for kind in Memory.objects.values_list("type", flat=True).distinct().order_by("type"):
        tidy = "fact" if is_effectively_empty(kind) else kind.strip()
        if tidy != kind:
            Memory.objects.filter(type=kind).update(type=tidy)
            changed[kind] = tidy
    return changed


class Migration(migrations.Migration):
    dependencies = [("memory", "0016_relation_statements")]

    operations = [migrations.RunPython(tidy_types, migrations.RunPython.noop)]
