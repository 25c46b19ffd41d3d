"""API tokens get an end (``expires_at``) and are tied to their owner's password
(``password_digest``).

A token made before this migration lives the configured lifetime from when it was made, like a
new one (so one older than that is refused from now on), and stays tied to the password its
owner has now.
"""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import migrations, models


def end_and_tie_existing_tokens(apps, schema_editor):
    ApiToken = apps.get_model("allocations", "ApiToken")
    lifetime = timedelta(days=getattr(settings, "GPUGOV_API_TOKEN_LIFETIME_DAYS", 30))
    for token in ApiToken.objects.select_related("user"):
        token.expires_at = token.created_at + lifetime
        token.password_digest = hashlib.sha256(token.user.password.encode()).hexdigest()
        token.save(update_fields=["expires_at", "password_digest"])


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0010_whatif_run_heartbeat"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="password_digest",
            field=models.CharField(
                default="",
                editable=False,
                help_text="SHA-256 of the owner's stored password hash when made",
                max_length=64,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(end_and_tie_existing_tokens, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(editable=False),
        ),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("password_digest__regex", "^[0-9a-f]{64}$")),
                name="api_token_password_digest_hex",
            ),
        ),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("expires_at__gt", models.F("created_at"))),
                name="api_token_expires_after_creation",
            ),
        ),
    ]
