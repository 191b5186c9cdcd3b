-- 0026: the tenant's indexes hold no running task (issue 12).
--
-- tasks_tenant_id_idx held every task, so each status change that left its
-- page (the claim, the fenced start, the finish: a status change is never
-- HOT, the status partial indexes name the column) wrote one more entry into
-- it, and the batch enqueue wrote one entry per task into it and another into
-- tasks_pending_tenant_idx. Split by status, a task has one tenant entry while
-- it waits (tasks_pending_tenant_idx) and one once it has finished
-- (tasks_finished_tenant_idx), and none while it runs: a tenant's running
-- tasks are read from tasks_running_idx, which holds only the tasks in
-- flight. Both are keyed (tenant, id), so the task list walks each in id
-- order and merges them with the running tasks (tasks_list_for_tenant), and
-- the bulk cancel walks the waiting ones in id order
-- (tasks_cancel_matching_if_not_started). Measured in BENCHMARKS.md (issue
-- 12, eleventh pass).
drop index tasks_tenant_id_idx;
create index tasks_finished_tenant_idx on tasks (tenant, id) where status in ('succeeded', 'dead', 'cancelled', 'missed');
drop index tasks_pending_tenant_idx;
create index tasks_pending_tenant_idx on tasks (tenant, id) where status in ('scheduled', 'queued');
