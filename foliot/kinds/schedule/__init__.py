"""The schedule kind: a schedule's actor over the pure schedule machine, and its entry points."""
