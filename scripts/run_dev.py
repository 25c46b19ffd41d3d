#!/usr/bin/env python
"""Starts the console for `make run` (the allocation loop's worker and beat join it later)."""

import argparse
import os
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", default="8000")
args = parser.parse_args()
os.environ.setdefault("DJANGO_DEBUG", "1")
print(f"gpugov console: http://{args.host}:{args.port}/", flush=True)
sys.exit(subprocess.call([sys.executable, "manage.py", "runserver", f"{args.host}:{args.port}"]))
