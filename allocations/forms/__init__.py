"""Forms, one module per surface: ``policy`` for the admin console, ``jobs`` for team self-service."""
