"""Several nodes on one PostgreSQL: partitions, leases and their fencing (issue 10)."""
