from django.apps import AppConfig


class AllocationsConfig(AppConfig):
    name = "allocations"
    verbose_name = "GPU allocations"

    def ready(self) -> None:
        # Every process registers the app's Celery tasks (a worker's autodiscovery would only
        # do so in the worker): services queue them by name through the app's registry
        # (``services.cycle_requests.queue_task``), so that routing and eager mode apply to
        # them as to any task, without a core module importing the tasks modules.
        from allocations import tasks  # noqa: F401
        from allocations.whatif import tasks as whatif_tasks  # noqa: F401
