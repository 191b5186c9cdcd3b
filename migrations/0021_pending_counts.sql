-- 0021: maxPendingTasks at a constant cost (issue 12).
--
-- The enqueue counted the tenant's pending tasks (index-only, up to the
-- limit) in its own statement: 60-70 ms per single enqueue with 100,000
-- pending. It now sums the tenant's rows here: at most PENDING_SHARDS rows,
-- whatever the backlog.
--
-- Every statement that creates pending tasks (enqueue, replay, trigger, the
-- materialization of occurrences) or takes tasks out of pending (finish and
-- reaper to a terminal status, the cancels, the withdrawals of occurrences)
-- adds its count to one row of the tenant, in the same statement, so the sum
-- is the tenant's pending tasks as of the statement's snapshot, as the count
-- was. Sharded: a statement writes the shard of its backend
-- (pg_backend_pid() % 16), so concurrent enqueues of one tenant, and its
-- finishing consumers, each on their own connection, rarely wait on one row
-- lock (held to commit; issue 14 asks that one tenant's enqueues not
-- serialize). A shard may go negative; only the tenant's sum means anything.
-- Statements write these rows after their task rows, in tenant order.
create table tenant_pending_counts (
  tenant text not null,
  shard  smallint not null,
  n      bigint not null,
  primary key (tenant, shard)
);

insert into tenant_pending_counts (tenant, shard, n)
select tenant, 0, count(*) from tasks where status in ('scheduled', 'queued', 'running') group by tenant;
