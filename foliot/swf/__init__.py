"""AWS SWF: the pure execution machine (model, events, decisions, timeouts, history)."""
