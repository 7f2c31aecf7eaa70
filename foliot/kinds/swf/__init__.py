"""AWS SWF executions as actors on the runtime, the SWF registry and its queries."""
