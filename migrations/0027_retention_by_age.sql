-- 0027: the retention reads the history by age, never by tenant (issue 12).
--
-- tasks_finished_tenant_idx (0026) and tasks_finished_idx (0001) had the same
-- predicate, the four terminal statuses, so the sweep's probe and the purge
-- ("is any terminal task older than the retention?", in finished_at order)
-- could be planned on either. Over statistics taken before any task had
-- finished (a fresh table, a drained backlog), both looked empty and the
-- planner took the tenant index, filtered every terminal task by finished_at
-- and sorted what was left: each probe of a drain's tail read the whole
-- history to learn that none of it was old enough (1.7-5 ms per probe at
-- 12,000 finished tasks, growing with the history).
--
-- retention_by_age: the tenant index also requires `tenant is not null`. The
-- column is never null, so it holds the same rows; every read by tenant
-- (`tenant = $n`, a strict comparison) implies it, and a read that names no
-- tenant (the probe's purge arm, the purge, /metrics' recent window) does
-- not, so only tasks_finished_idx can answer it. Guarded by a plans test.
drop index tasks_finished_tenant_idx;
create index tasks_finished_tenant_idx on tasks (tenant, id)
  where status in ('succeeded', 'dead', 'cancelled', 'missed') and tenant is not null;
