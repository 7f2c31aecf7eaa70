"""Schedules as data: the definition a PUT carries and the pure machine that decides each fire."""
