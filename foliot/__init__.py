"""Foliot: a durable workflow engine on Trio."""

__version__ = "0.1.0"
