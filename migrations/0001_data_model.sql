-- 0001: the data model (DESIGN §3).
--
-- Postgres is the single source of truth: every state change is one guarded
-- statement against these tables, and the constraints below make the states
-- the code relies on impossible to violate, whoever writes.
-- Hot scans use partial indexes so that their cost depends on the live work,
-- never on how many finished rows have piled up.

-- One row per queue: whether it may be claimed, and its virtual clock (the
-- vtime of the work most recently claimed; see DESIGN §7).
create table queues (
  name        text primary key,
  paused      boolean not null default false,
  vclock      double precision not null default 0,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  constraint queues_name_format check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$')
);

-- One row per (queue, tenant): its fair share and its last assigned vtime.
-- A tenant's enqueues update only its own row, so different tenants never
-- serialize on a shared row.
create table tenants (
  queue       text not null,
  tenant      text not null,
  weight      double precision not null default 1,
  last_vtime  double precision not null default 0,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  primary key (queue, tenant),
  constraint tenants_weight_positive check (weight > 0 and weight <= 1000)
);

-- Recurring and future definitions. Exactly one kind's columns are set.
create table schedules (
  id                  bigint generated always as identity primary key,
  tenant              text not null,
  name                text not null,
  kind                text not null,
  cron                text,
  timezone            text not null default 'UTC',
  interval_seconds    integer,
  recurrence_every    integer,
  recurrence_unit     text,
  recurrence_start    timestamptz,
  fire_at             timestamptz,
  task                text not null,
  payload             jsonb not null default '{}'::jsonb,
  queue               text not null default 'default',
  max_attempts        integer not null default 5,
  options             jsonb not null default '{}'::jsonb,
  misfire             text not null default 'run_once',
  misfire_grace_seconds integer not null default 60,
  catch_up_limit      integer not null default 100,
  overlap             text not null default 'allow',
  enabled             boolean not null default true,
  next_run_at         timestamptz,
  last_fired_at       timestamptz,
  created_at          timestamptz not null default now(),
  updated_at          timestamptz not null default now(),
  constraint schedules_tenant_name_key unique (tenant, name),
  constraint schedules_kind check (kind in ('cron', 'interval', 'recurrence', 'once')),
  constraint schedules_kind_columns check (
    case kind
      when 'cron' then cron is not null
      when 'interval' then interval_seconds is not null and interval_seconds >= 1
      when 'recurrence' then recurrence_every >= 1 and recurrence_start is not null
        and recurrence_unit in ('minutes', 'hours', 'days', 'weeks', 'months')
      when 'once' then fire_at is not null
    end),
  constraint schedules_misfire check (misfire in ('run_once', 'catch_up', 'skip')),
  constraint schedules_overlap check (overlap in ('allow', 'skip')),
  constraint schedules_max_attempts check (max_attempts between 1 and 100)
);

-- Due schedules, for the materializer.
create index schedules_due_idx on schedules (next_run_at) where enabled and next_run_at is not null;

-- One row per unit of work. See DESIGN §4 for the lifecycle.
create table tasks (
  id               bigint generated always as identity primary key,
  tenant           text not null,
  queue            text not null default 'default',
  task             text not null,
  payload          jsonb not null default '{}'::jsonb,
  status           text not null,
  -- timing
  run_at           timestamptz not null,
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  dispatched_at    timestamptz,
  started_at       timestamptz,
  finished_at      timestamptz,
  -- attempts: counted when claimed, so a task that kills its worker still ends
  attempts         integer not null default 0,
  max_attempts     integer not null default 5,
  last_error       text,
  backoff_base_ms  integer not null default 1000,
  backoff_max_ms   integer not null default 3600000,
  timeout_ms       integer not null default 30000,
  delivery         text not null default 'at_least_once',
  -- fairness
  vtime            double precision,
  -- lease and fencing
  claimed_by       text,
  lease_epoch      bigint not null default 0,
  lease_expires_at timestamptz,
  -- origin
  schedule_id      bigint references schedules (id) on delete set null,
  scheduled_for    timestamptz,
  -- dedup
  idempotency_key  text,
  constraint tasks_status check (status in
    ('scheduled', 'queued', 'running', 'succeeded', 'dead', 'cancelled', 'missed')),
  constraint tasks_running_has_lease check (
    status <> 'running' or (claimed_by is not null and lease_expires_at is not null and lease_epoch > 0)),
  constraint tasks_queued_has_vtime check (status <> 'queued' or vtime is not null),
  constraint tasks_terminal_has_finished_at check (
    (status in ('succeeded', 'dead', 'cancelled', 'missed')) = (finished_at is not null)),
  constraint tasks_attempts_range check (attempts >= 0 and attempts <= max_attempts),
  -- A waiting task always has an attempt left: exhausted tasks end `dead`.
  constraint tasks_waiting_has_attempt_left check (status not in ('scheduled', 'queued') or attempts < max_attempts),
  constraint tasks_max_attempts_range check (max_attempts between 1 and 100),
  constraint tasks_delivery check (delivery in ('at_least_once', 'at_most_once')),
  constraint tasks_backoff_positive check (backoff_base_ms > 0 and backoff_max_ms >= backoff_base_ms),
  constraint tasks_timeout_positive check (timeout_ms > 0),
  constraint tasks_occurrence_origin check ((schedule_id is null) or (scheduled_for is not null))
) with (fillfactor = 90);

-- One occurrence per schedule fire time, however many sweeps overlap.
create unique index tasks_schedule_occurrence_key on tasks (schedule_id, scheduled_for)
  where schedule_id is not null;
-- Idempotency keys are unique per tenant.
create unique index tasks_idempotency_key on tasks (tenant, idempotency_key)
  where idempotency_key is not null;
-- Promote: scheduled tasks by due time.
create index tasks_due_idx on tasks (run_at) where status = 'scheduled';
-- Claim: runnable tasks in fair order.
create index tasks_runnable_idx on tasks (queue, vtime, id) where status = 'queued';
-- Reap: running tasks by lease expiry.
create index tasks_lease_idx on tasks (lease_expires_at) where status = 'running';
-- Retention: finished tasks by age.
create index tasks_finished_idx on tasks (finished_at)
  where status in ('succeeded', 'dead', 'cancelled', 'missed');
-- Listing a tenant's tasks, newest first, with keyset pagination.
create index tasks_tenant_id_idx on tasks (tenant, id);

-- Spent idempotency keys whose task row retention has deleted: a spent key is
-- never resurrected, so the purge moves the key here in the same statement
-- that deletes the task.
create table spent_idempotency_keys (
  tenant           text not null,
  idempotency_key  text not null,
  task_id          bigint not null,
  status           text not null,
  spent_at         timestamptz not null default now(),
  primary key (tenant, idempotency_key)
);

-- Tenant API keys: only a hash is stored, with a short public prefix to find
-- it by. The key itself is shown once, at creation.
create table api_keys (
  id          bigint generated always as identity primary key,
  tenant      text not null,
  prefix      text not null,
  key_hash    text not null,
  created_at  timestamptz not null default now(),
  revoked_at  timestamptz,
  constraint api_keys_prefix_key unique (prefix)
);
