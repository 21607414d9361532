"""Which memory stated a relation (relation_statements), backfilled as nearly as the store can tell:
the graph did not record it. A relation is taken as stated once by each memory (not purged) that
mentions both of its entities and holds its words (in any case of ASCII letters, as SQLite's
lower() folds only those; an underscore in them matches any character, a space too), else by
every memory that mentions both, which is what a structured triple writes. A relation no memory
mentions both ends of gets no statement: it goes with its entities, as before."""

import django.db.models.deletion
from django.db import migrations, models

_BOTH = """
FROM relations
JOIN memory_entity_mentions AS source_side ON source_side.entity_id = relations.source_id
JOIN memory_entity_mentions AS target_side
  ON target_side.entity_id = relations.target_id AND target_side.memory_id = source_side.memory_id
JOIN memories ON memories.id = source_side.memory_id AND memories.purged_at IS NULL
"""
# The words as a LIKE pattern on both engines: `!` escapes `!` and `%` (PostgreSQL's default
# escape, a backslash, would fail on words ending in one); `_` stays a wildcard for a space.
_WORDS = "replace(replace(lower({}.relation_type), '!', '!!'), '%', '!%')"
_SAYS_IT = f"lower(memories.content) LIKE '%' || {_WORDS.format('relations')} || '%' ESCAPE '!'"

BACKFILL = f"""
INSERT INTO relation_statements (memory_id, relation_id, mentions)
SELECT DISTINCT source_side.memory_id, relations.id, 1
{_BOTH}
WHERE {_SAYS_IT} OR NOT EXISTS (
  SELECT 1 FROM relations AS the_same
  JOIN memory_entity_mentions AS source_side ON source_side.entity_id = the_same.source_id
  JOIN memory_entity_mentions AS target_side
    ON target_side.entity_id = the_same.target_id
    AND target_side.memory_id = source_side.memory_id
  JOIN memories ON memories.id = source_side.memory_id AND memories.purged_at IS NULL
  WHERE the_same.id = relations.id
    AND lower(memories.content) LIKE '%' || {_WORDS.format("the_same")} || '%' ESCAPE '!'
)
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0015_rehash_blank_characters")]

    operations = [
        migrations.CreateModel(
            name="RelationStatement",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("mentions", models.PositiveIntegerField(default=1)),
                (
                    "memory",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="relation_statements",
                        to="memory.memory",
                    ),
                ),
                (
                    "relation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="statements",
                        to="memory.relation",
                    ),
                ),
            ],
            options={
                "db_table": "relation_statements",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("memory", "relation"), name="relation_statements_memory_relation"
                    )
                ],
            },
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
