# docs/resources.md: resources beyond GPUs. Every new column defaults to what means GPUs alone.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('allocations', '0021_preemption_grace_live'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='job',
            name='job_gpus_positive',
        ),
        migrations.AddField(
            model_name='instancetype',
            name='memory_gib_per_node',
            field=models.PositiveIntegerField(default=0, help_text='GiB; 0: memory not counted'),
        ),
        migrations.AddField(
            model_name='instancetype',
            name='partitions_per_node',
            field=models.JSONField(blank=True, default=dict, help_text='{profile: count per node}, e.g. {"mig-1g.10gb": 14}'),
        ),
        migrations.AddField(
            model_name='instancetype',
            name='vcpus_per_node',
            field=models.PositiveIntegerField(default=0, help_text='0: vCPU not counted'),
        ),
        migrations.AddField(
            model_name='job',
            name='memory_gib',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='partitions',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='job',
            name='vcpus',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='borrow_limit_memory_gib',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='borrow_limit_partitions',
            field=models.JSONField(blank=True, default=dict, help_text='{profile: count}'),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='borrow_limit_vcpus',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='instances',
            field=models.PositiveIntegerField(blank=True, help_text="N nodes' worth of everything", null=True),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='memory_gib',
            field=models.PositiveIntegerField(blank=True, help_text='GiB; empty: the ratio', null=True),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='partitions',
            field=models.JSONField(blank=True, default=dict, help_text='{profile: count}'),
        ),
        migrations.AddField(
            model_name='teamquota',
            name='vcpus',
            field=models.PositiveIntegerField(blank=True, help_text='vCPU; empty: the ratio', null=True),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('gpus__gte', 1), models.Q(('partitions', {}), _negated=True), _connector='OR'), name='job_asks_something'),
        ),
        migrations.AddConstraint(
            model_name='teamquota',
            constraint=models.CheckConstraint(condition=models.Q(('instances__isnull', True), models.Q(('memory_gib__isnull', True), ('vcpus__isnull', True)), _connector='OR'), name='quota_instances_alone'),
        ),
    ]
