-- Timers of every kind of actor share one table and one timer wheel: a row names its actor by
-- (actor_kind, run_id), where run_id is the actor's id (unique across kinds). Rows written
-- before this migration are the timers of Foliot runs.
ALTER TABLE timers ADD COLUMN actor_kind TEXT NOT NULL DEFAULT 'run';
