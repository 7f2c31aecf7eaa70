"""The shell around the pure core: run actors, their supervisor, timers, dispatch, queues."""
