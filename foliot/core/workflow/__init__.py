"""Workflows as data and the run's pure machine."""
