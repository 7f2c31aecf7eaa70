"""The AWS SWF model and its pure machine."""
