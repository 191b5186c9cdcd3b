-- 0011: per-tenant quotas (issue 10, finding 4). Nothing bounded what one
-- tenant could hold. A tenant's row here overrides the defaults from vars
-- (QUOTA_*); a null column means "the default".

create table tenant_quotas (
  tenant                         text primary key,
  max_pending_tasks              integer,
  max_schedules                  integer,
  min_schedule_interval_seconds  integer,
  created_at                     timestamptz not null default now(),
  updated_at                     timestamptz not null default now(),
  constraint tenant_quotas_max_pending_tasks_range check (max_pending_tasks between 0 and 100000000),
  constraint tenant_quotas_max_schedules_range check (max_schedules between 0 and 1000000),
  constraint tenant_quotas_min_schedule_interval_range check (min_schedule_interval_seconds between 1 and 31622400)
);

-- A tenant's pending tasks (scheduled, queued, running). The enqueue counts
-- them inside its own statement (no extra round trip, no shared row written)
-- with an index-only scan stopped at the limit, so the check costs at most
-- the tenant's own pending work, never the finished history. status already
-- appears in other partial-index predicates, so no update that was HOT before
-- (mark, start, heartbeat) stops being HOT.
create index tasks_pending_tenant_idx on tasks (tenant) where status in ('scheduled', 'queued', 'running');

-- Raised from inside the enqueue statement when a batch would take the tenant
-- past maxPendingTasks: the whole statement (the batch) is refused, nothing is
-- written. SQLSTATE TQ002; the detail names the quota, the hint is the limit.
-- `pending` may be counted only up to the limit (enough to decide).
create function tasks_refuse_over_pending_quota(tenant text, pending bigint, adding bigint, max_pending bigint)
returns boolean
language plpgsql volatile
as $$
begin
  if adding > 0 and pending + adding > max_pending then
    raise exception 'quota maxPendingTasks exceeded: % new tasks would take the tenant past its limit of % pending tasks',
      adding, max_pending
      using errcode = 'TQ002', detail = 'maxPendingTasks', hint = max_pending::text;
  end if;
  return true;
end
$$;

-- Also in this migration (issue 10, finding 7): an idempotency key names one
-- task. Reusing it with another task type or queue is a client bug, not a
-- reschedule: the enqueue's ON CONFLICT DO UPDATE calls this with the row it
-- found (the latest committed version, so a concurrent enqueue of the same
-- key is covered too) and the whole statement is refused with SQLSTATE TQ003
-- (409 conflict). Only run_at and payload may change while the task waits.
create function tasks_keep_task_type_of_key(key text, held_task text, held_queue text, new_task text, new_queue text)
returns text
language plpgsql immutable
as $$
begin
  if held_task is distinct from new_task or held_queue is distinct from new_queue then
    raise exception 'idempotency key "%" is held by a task of type "%" in queue "%"', key, held_task, held_queue
      using errcode = 'TQ003', detail = key;
  end if;
  return held_task;
end
$$;
