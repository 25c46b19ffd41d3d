"""``manage.py issue_access_key <username>``: a new access key for SageMaker's API.

Prints the access key id and the secret (shown this once) in the form of
``~/.aws/credentials``. The audit trail records it with the actor "system". Refused, naming the
limit, when the user already holds ``GPUGOV_ACCESS_KEY_LIMIT`` keys (docs/security.md).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.services import access_keys


class Command(BaseCommand):
    help = "Make an access key for SageMaker's API (/aws/sagemaker/) and print its secret once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="whose key it is")

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"username: no user {username!r}")
        try:
            key, secret = access_keys.access_key_create(user=user, actor=None)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(
            f"[gpugov]\naws_access_key_id = {key.access_key_id}\naws_secret_access_key = {secret}\n"
            f"region = {settings.GPUGOV_AWS_REGION}\n"
        )
        self.stderr.write("The secret is shown this once; store it now.")
