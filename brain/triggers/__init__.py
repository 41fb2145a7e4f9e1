"""Triggers that create runs: schedules (``cron``, ``every``) and file watchers (``watch``)."""
