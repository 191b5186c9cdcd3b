-- 0018: rate limits per key (issue 16), and a cheaper slot-freeing trigger.
--
-- A task may carry `rate_key`, `rate_limit` and `rate_period_seconds`: at
-- most `rate_limit` starts of its tenant's tasks with that key in any window
-- of `rate_period_seconds`.
--
-- The algorithm is GCRA with no burst tolerance: starts of one key are at
-- least `step` = period / limit apart (rounded up to the microsecond, so
-- rounding can never fit an extra start into a window). Two starts at least
-- `step` apart put at most `limit` starts in any half-open window of one
-- period: the bound holds for every sliding window, not only for aligned
-- ones, with one timestamp of state per key. A token bucket or GCRA with a
-- burst allowance would let 2 x limit starts into one window (a full burst at
-- the end of one window, refilled tokens at the start of the next), and a
-- sliding-window log holds up to `limit` (10,000) timestamps per key. The
-- price: no bursts; `limit: 5, periodSeconds: 1` starts one task every
-- 200 ms, never five at once.
--
-- Each rate_limits row keeps two lines:
-- - `next_claim_at`: the claim reserves each rate-limited task a start at or
--   after it (its run_at moves there) and sends the task with that delay, so
--   a backlog is spaced out instead of refused. A reservation beyond the
--   look-ahead is not taken: the task goes back to `scheduled` at the time the
--   line would allow (no attempt spent) and the promote brings it back.
-- - `next_start_at`: the fenced start enforces the bound on the starts it
--   records. A message delivered late could otherwise start beside the next
--   one on time. A task starts at `greatest(now, run_at, line)` (the
--   consumer waits until then), the line moves past it by one step, and a
--   task the line would push more than the start's wait budget is put back
--   (`queued` with its vtime, attempt refunded, run_at moved to when allowed).
-- `claim_from` and `start_from` are scratch: the line as the statement found
-- it, read back from RETURNING (the rows are taken with INSERT ... ON
-- CONFLICT DO UPDATE, in (tenant, key) order, like concurrency_slots).
--
-- The same key with different limits: the claim writes the limit of the most
-- recently enqueued task it claims (the highest id), so the most recent
-- task's limit applies once it is claimed.
alter table tasks
  add column rate_key text,
  add column rate_limit integer,
  add column rate_period_seconds integer,
  add constraint tasks_rate_all_or_none check (
    (rate_key is null) = (rate_limit is null) and (rate_key is null) = (rate_period_seconds is null)),
  add constraint tasks_rate_key_length check (char_length(rate_key) between 1 and 256),
  add constraint tasks_rate_limit_range check (rate_limit between 1 and 10000),
  add constraint tasks_rate_period_range check (rate_period_seconds between 1 and 86400);

create table rate_limits (
  tenant         text not null,
  key            text not null,
  max_starts     integer not null,
  period_seconds integer not null,
  next_claim_at  timestamptz not null default '-infinity',
  next_start_at  timestamptz not null default '-infinity',
  claim_from     timestamptz not null default '-infinity',
  start_from     timestamptz not null default '-infinity',
  updated_at     timestamptz not null default now(),
  primary key (tenant, key),
  constraint rate_limits_max_starts_range check (max_starts between 1 and 10000),
  constraint rate_limits_period_range check (period_seconds between 1 and 86400)
);

-- The spacing between two starts of a key: period / limit, rounded up to the
-- microsecond (timestamptz's resolution).
create function rate_limit_step(max_starts integer, period_seconds integer) returns interval
language sql immutable parallel safe
as $$ select ceil(period_seconds * 1000000.0 / max_starts)::bigint * interval '1 microsecond' $$;

-- Where a key's line stands after reserving starts for a batch: the i-th
-- task (1-based, in due order) starts at greatest(line, base_i) + (i - 1) x
-- step, where base_i = max over j <= i of (due_j - (j - 1) x step) (the
-- caller's running max: each start is its due time or a step after the one
-- before, whichever is later). Only the starts at or before `horizon` are
-- taken; the line moves a step past the last of them (unchanged if none).
create function rate_limit_line_after(line timestamptz, bases timestamptz[], step interval, horizon timestamptz)
returns timestamptz language sql immutable parallel safe
as $$
  select coalesce(max(greatest(line, u.base) + u.pos * step), line)
  from unnest(bases) with ordinality as u(base, pos)
  where greatest(line, u.base) + (u.pos - 1) * step <= horizon
$$;

-- Cheaper slot freeing (issue 16's bench: the drain with every task under one
-- concurrency key ran at 0.55-0.75x the plain drain). Every statement leaving
-- `running` updated the key's concurrency_slots row through the trigger, so
-- the consumers' finishes and the sweeps' claims of one key queued on one row
-- lock, held until each commit, and left a dead version of it per statement.
-- A free is now an insert into concurrency_frees (no row is shared, nothing
-- waits); the claim, which locks the slot row anyway, deletes the frees of
-- the keys it takes (SKIP LOCKED: each is counted by exactly one claim) and
-- subtracts them. A key's running count is the slot row's `running` less its
-- frees not yet counted: the API, the wake-up safety net and the tests read
-- it so. The statement-level trigger and the wake of one parked task per free
-- stay as they were.
create table concurrency_frees (
  id     bigint generated always as identity primary key,
  tenant text not null,
  key    text not null,
  n      integer not null,
  constraint concurrency_frees_n_positive check (n > 0)
);
create index concurrency_frees_key_idx on concurrency_frees (tenant, key);

-- The wake runs only when the key has parked tasks: an UPDATE of tasks, even
-- of no row, fires this trigger again (statement-level), once more per
-- finishing statement of every key.
create or replace function concurrency_slots_free(p_tenant text, p_key text, n integer) returns void language plpgsql as $$
begin
  insert into concurrency_frees (tenant, key, n) values (p_tenant, p_key, n);
  if exists (select 1 from tasks p
             where p.status = 'queued' and p.parked and p.tenant = p_tenant and p.concurrency_key = p_key) then
    update tasks t set parked = false
    where t.id in (select p.id from tasks p
                   where p.status = 'queued' and p.parked and p.tenant = p_tenant and p.concurrency_key = p_key
                   order by p.vtime, p.id
                   limit n
                   for update skip locked);
  end if;
end $$;

-- The task as GET /v1/tasks/{id} shows a finished one (migration 0017, for
-- completion callbacks) now shows its rate limit too, as taskJson does.
create or replace function tasks_shown_json(t tasks) returns jsonb
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
    'rateLimit', case when t.rate_key is null then null
                      else jsonb_build_object('key', t.rate_key, 'limit', t.rate_limit,
                                              'periodSeconds', t.rate_period_seconds) end,
    'priority', coalesce(t.priority, 0), 'result', t.result, 'callback', t.callback, 'callbackOf', t.callback_of::text)
$$;
