-- 0017: attempt history and results (issue 15).
--
-- One row per attempt that ended, written by the statement that ended it (the
-- consumer's fenced finish, the reaper, the fenced start for a message it
-- skipped): a CTE insert, so no round trip is added per task or per batch.
-- Retention deletes a task's attempts in the statement that deletes the task
-- (tasks_purge_finished), as do the schedule statements that delete planned
-- occurrences. No foreign key: its check would lock every finished task's row
-- once more (a heap lock record per task in the WAL of the hot path), and the
-- deletes name the rows themselves. Read only through the task, whose tenant
-- the reading statement checks, so the row carries no tenant.
--
-- No primary key: a duplicate message can be skipped at the epoch of an
-- attempt that later finishes, so (task_id, epoch) is not unique; order is
-- by finished_at (ties by epoch), the clock of the statement that wrote it.
create table task_attempts (
  task_id        bigint not null,
  attempt        integer not null,
  epoch          bigint not null,
  outcome        text not null,
  started_at     timestamptz,
  finished_at    timestamptz not null,
  -- The error's name and message, cut by the writer to 2 KiB together.
  error_name     text,
  error_message  text,
  -- For http tasks: the response status, when a response came.
  http_status    smallint,
  constraint task_attempts_outcome check (outcome in ('succeeded', 'failed', 'timed_out', 'lease_expired', 'cancelled', 'skipped_stale'))
);
create index task_attempts_task_idx on task_attempts (task_id, finished_at);

-- A handler's return value (any JSON, at most 64 KiB: the consumer fails the
-- attempt otherwise), written by the finish that records the success.
alter table tasks add column result jsonb;

-- Completion callbacks (issue 15). `callback` is the task option
-- {url, on: [terminal statuses]} (the API stores `on` explicitly), null for
-- most tasks. When a task with one reaches a status in `on`, a row trigger
-- inserts the callback: an `http` task (retried, SSRF-checked at run time,
-- signed with the tenant's secret, webhook-id `<id>.callback`) that POSTs
-- the task as GET /v1/tasks/{id} shows it. The trigger fires inside the
-- statement that finished the task, whichever it is (the finish, the reaper,
-- a cancel, a bulk cancel, a schedule's pause, a missed occurrence inserted
-- as such): no path can forget it, and the callback commits or rolls back
-- with the finish. Its WHEN clause is evaluated per row without calling
-- anything, so tasks without a callback pay one null test per write.
-- callback_of names the original; its unique index makes the callback
-- once per task (a terminal state is absorbing anyway).
alter table tasks add column callback jsonb, add column callback_of bigint;
create unique index tasks_callback_of_key on tasks (callback_of) where callback_of is not null;

-- An instant as the API writes it (Date.prototype.toISOString).
create function tasks_iso(ts timestamptz) returns text
language sql immutable
as $$ select to_char(ts at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- The task as GET /v1/tasks/{id} shows a finished one (taskJson in
-- src/http/schemas.ts; a test compares the two).
create function tasks_shown_json(t tasks) returns jsonb
language sql stable
as $$
  select jsonb_build_object(
    'id', t.id::text, 'task', t.task, 'queue', t.queue, 'status', t.status, 'payload', t.payload,
    'runAt', tasks_iso(t.run_at), 'createdAt', tasks_iso(t.created_at), 'updatedAt', tasks_iso(t.updated_at),
    'dispatchedAt', tasks_iso(t.dispatched_at), 'dispatch', null,
    'startedAt', tasks_iso(t.started_at), 'finishedAt', tasks_iso(t.finished_at),
    'attempts', t.attempts, 'maxAttempts', t.max_attempts, 'lastError', t.last_error,
    'idempotencyKey', t.idempotency_key, 'delivery', t.delivery,
    'timeout', trim_scale(t.timeout_ms / 1000.0),
    'backoff', jsonb_build_object('base', trim_scale(t.backoff_base_ms / 1000.0), 'max', trim_scale(t.backoff_max_ms / 1000.0)),
    'scheduleId', t.schedule_id::text, 'scheduledFor', tasks_iso(t.scheduled_for), 'replayOf', t.replay_of::text,
    'concurrency', case when t.concurrency_key is null then null
                        else jsonb_build_object('key', t.concurrency_key, 'limit', t.concurrency_limit) end,
    'priority', coalesce(t.priority, 0), 'result', t.result, 'callback', t.callback, 'callbackOf', t.callback_of::text)
$$;

create function tasks_enqueue_callback() returns trigger
language plpgsql
as $$
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
  return null;
end
$$;

create trigger tasks_callback_on_finish after update of status on tasks
  for each row
  when (new.callback is not null and old.status is distinct from new.status
        and new.status in ('succeeded', 'dead', 'cancelled', 'missed'))
  execute function tasks_enqueue_callback();

create trigger tasks_callback_on_insert after insert on tasks
  for each row
  when (new.callback is not null and new.status in ('succeeded', 'dead', 'cancelled', 'missed'))
  execute function tasks_enqueue_callback();
