"""The HTTP API (quart-trio on hypercorn's trio worker)."""
