"""Observability: metrics, trends, diagnosis."""
