"""The engine is pure Python (STYLE.md): importing it loads no Django module."""

import subprocess
import sys


def test_importing_the_engine_loads_no_django_module() -> None:
    code = (
        "import sys, allocations.engine; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', 'plotly'}); "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
