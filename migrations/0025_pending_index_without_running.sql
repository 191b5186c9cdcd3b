-- 0025: the tenant's pending index stops at queued (issue 12).
--
-- tasks_pending_tenant_idx held scheduled, queued and running tasks, so every
-- claim (queued -> running, a new row version) and every fenced start that
-- moved its row to another page wrote one more entry into it: about 1.3
-- btree inserts and 90 B of WAL per drained task (pg_waldump of a drain of
-- 20,000, PostgreSQL 15). Nothing needs a tenant's running tasks by this
-- index: the pending quota reads tenant_pending_counts (0021), and the reads
-- that count a tenant's live tasks (queues_stats_for_tenant, rate_limit_get)
-- take its running ones from tasks_running_idx, as GET /metrics always did.
drop index tasks_pending_tenant_idx;
create index tasks_pending_tenant_idx on tasks (tenant) where status in ('scheduled', 'queued');
