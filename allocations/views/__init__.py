"""Views, one module per surface: the admin console, team self-service, the allocation loop."""
