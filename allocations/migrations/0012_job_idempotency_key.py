"""A job resubmitted with an idempotency key keeps it: the same key from the same submitter
gives back that job (a unique constraint, so that concurrent requests cannot both insert)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0011_api_token_lifetime"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="idempotency_key",
            field=models.CharField(blank=True, default="", editable=False, max_length=255),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key", ""), _negated=True),
                fields=("submitter", "idempotency_key"),
                name="job_idempotency_key_once_per_submitter",
            ),
        ),
    ]
