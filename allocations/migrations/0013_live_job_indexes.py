from django.db import migrations, models
from django.db.models import F


def ends_when_recorded(apps, schema_editor):
    """An ended simulated job's ends_at is now when the cluster recorded its end, from which it
    is listed and kept; rows ended before this release take their real end instead (a
    cancelled one still had its planned end, or none)."""
    SimulatedJob = apps.get_model("allocations", "SimulatedJob")
    SimulatedJob.objects.filter(state__in=("finished", "failed", "cancelled")).update(ends_at=F("finished_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("allocations", "0012_job_idempotency_key"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ("pending", "running"))), fields=["id"], name="job_live"
            ),
        ),
        migrations.RunPython(ends_when_recorded, migrations.RunPython.noop),
    ]
