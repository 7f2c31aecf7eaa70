-- Recovery pages the open tasks (issue 37): `tasks_open` holds (created_at, token) too, so each
-- page of 500 in created order is read from the cursor along the index, not sorted out of all
-- the open tasks again. Replaced, not added: a task's commit maintains no more indexes.
DROP INDEX IF EXISTS tasks_open;
CREATE INDEX tasks_open ON tasks(status, created_at, token) WHERE status = 'open';
