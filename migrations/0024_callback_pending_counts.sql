-- 0024: a completion callback's task counts as pending (issue 12).
--
-- The callback task is inserted by the row trigger of migration 0017, not by
-- the finishing statement, so the statement's own count (0021) never saw it;
-- its later finish subtracted it, and every callback left the tenant's sum
-- one lower than its pending tasks. The trigger now counts the task it
-- inserts, on its backend's shard, after the statement's own count of the
-- same row (this transaction already holds it: no new lock order).
create or replace function tasks_enqueue_callback() returns trigger
language plpgsql
as $$
declare
  added integer;
begin
  -- Guard: only the statuses the caller asked for.
  if ((new.callback->'on') ? new.status) is not true then
    return null;
  end if;
  insert into tasks (tenant, queue, task, payload, status, run_at, max_attempts, backoff_base_ms, backoff_max_ms,
                     timeout_ms, delivery, callback_of, traceparent, tracestate, created_at, updated_at)
  values (new.tenant, new.queue, 'http',
          jsonb_build_object('url', new.callback->>'url', 'method', 'POST', 'body', tasks_shown_json(new)),
          'scheduled', new.finished_at, 10, 1000, 300000, 30000, 'at_least_once', new.id,
          new.traceparent, new.tracestate, new.finished_at, new.finished_at)
  on conflict (callback_of) where callback_of is not null do nothing;
  get diagnostics added = row_count;
  -- Guard: the callback task is pending, so it is counted (maxPendingTasks).
  insert into tenant_pending_counts as c (tenant, shard, n)
  select new.tenant, pg_backend_pid() % 16, added where added > 0
  on conflict (tenant, shard) do update set n = c.n + excluded.n;
  return null;
end
$$;

-- The counts written since 0021 missed every callback task: count again,
-- with writers to tasks held off for the count (tasks first, then the counts,
-- the order every statement takes them in).
lock table tasks in share mode;
lock table tenant_pending_counts in exclusive mode;
delete from tenant_pending_counts;
insert into tenant_pending_counts (tenant, shard, n)
select tenant, 0, count(*) from tasks where status in ('scheduled', 'queued', 'running') group by tenant;
