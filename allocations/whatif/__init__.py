"""The what-if policy lab (issue 10): drafts of the policy, replayed over a past window.

* ``drafts``: a draft's body (a full copy of the live policy), its diff from the live policy,
  the unsaved rows the console's forms edit, and the body as a scenario's policy and teams;
* ``history``: the jobs and nodes of a past window as a scenario (SCENARIO.md);
* ``figures``: what the lab shows of a replay (pure Python, beside the simulator's result);
* ``charts``: the Plotly figures comparing the replays;
* ``runs``: one what-if run, replay after replay, with progress and cancellation;
* ``tasks``: the Celery task that executes a run.

Replays go through ``allocations.simulation`` (the same loader and replay as ``manage.py
simulate``), so a run's exported scenario gives the same figures on the command line.
"""
