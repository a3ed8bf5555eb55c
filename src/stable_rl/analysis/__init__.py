"""Reading finished runs from their logs: ``stable-rl-report`` (``report``: figures, tables, held-out verdicts,
signs of collapse, pace), stability frontiers (``frontier``, ``frontier_across``), over one log reader
(``run_logs``)."""
