from django.db import migrations, models


def drafts_keep_the_history_off(apps, schema_editor):
    """A what-if draft's body is a complete policy (whatif/drafts.py): drafts saved before
    fairness over time get it off, as the live policy has it."""
    PolicyDraft = apps.get_model("allocations", "PolicyDraft")
    for draft in PolicyDraft.objects.all():
        policy = draft.body.get("cluster_policy") if isinstance(draft.body, dict) else None
        if isinstance(policy, dict) and "fair_share_half_life_s" not in policy:
            policy.setdefault("fair_share_half_life_s", 0)
            policy.setdefault("fair_share_history_percent", 0)
            draft.save(update_fields=["body"])


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0017_lost_work_history"),
    ]

    operations = [
        migrations.AddField(
            model_name="clusterpolicy",
            name="fair_share_half_life_s",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Seconds after which borrowing counts half in fair share; 0: only borrowing now counts.",
            ),
        ),
        migrations.AddField(
            model_name="clusterpolicy",
            name="fair_share_history_percent",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="How much of a team's fair share is its decayed borrowing (0-100); the rest is borrowing now.",
            ),
        ),
        migrations.AddConstraint(
            model_name="clusterpolicy",
            constraint=models.CheckConstraint(
                condition=models.Q(("fair_share_history_percent__lte", 100)),
                name="policy_fair_share_history_percent_valid",
            ),
        ),
        migrations.RunPython(drafts_keep_the_history_off, migrations.RunPython.noop),
    ]
