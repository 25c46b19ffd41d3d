"""Weekly utilization reports (issue 7).

* ``weeks``: ISO weeks in the cluster's time zone (``2026-W47`` -> the UTC instants of its
  Monday 00:00 and the next Monday 00:00);
* ``figures``: the figures of a week, per team and for the cluster, as plain dataclasses,
  from the history rollups, the pending-reason samples and JobEvent rows in a constant number
  of queries;
* ``charts``: Plotly figures of those figures (``allocations.charts.Chart``: table + figure);
* ``render``: the figures as PNG images on the server (kaleido driving Debian's chromium);
* ``email``: the email itself: HTML with inline images, plain text, a CSV of the daily figures.

Sending (claims, recipients, subscriptions) is ``reports/services.py``.
"""
