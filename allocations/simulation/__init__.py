"""The simulator: replay a scenario (SCENARIO.md) through the allocation engine on a simulated
clock. Pure Python like the engine: no Django, Celery or Plotly import, so that
``manage.py simulate``, ``python -m allocations.simulation`` and the benchmarks share it."""

from .replay import Replay, SimulationError, replay
from .result import Result, summary, to_json, write_json
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = [
    "Replay",
    "Result",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "load_scenario",
    "parse_scenario",
    "replay",
    "summary",
    "to_json",
    "write_json",
]
