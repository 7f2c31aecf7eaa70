"""Foliot runs as actors on the runtime."""
