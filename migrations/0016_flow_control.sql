-- 0016: flow control (issue 16): per-key concurrency limits, and priorities.
--
-- A task may carry `concurrency_key` and `concurrency_limit`: at most that
-- many tasks of its tenant with that key are `running` (claimed, including
-- claimed early by the look-ahead, or started, and not finished) at once.
--
-- concurrency_slots holds one counter per (tenant, key). Only the claim
-- statement raises `running`, and it does so with INSERT ... ON CONFLICT DO
-- UPDATE, which locks the slot row and reads its latest committed version, so
-- two overlapping claims can never both grant the last slot. `max_running`
-- is written by the enqueue: the most recently enqueued task's limit applies.
--
-- Every way out of `running` (the fenced finish, the reaper, a release, the
-- fenced start refusing a paused queue's task, a reschedule or cancel of a
-- task claimed early, a schedule withdrawing an occurrence claimed early, and
-- whatever statement comes later) frees the slot in the same statement
-- through the statement-level triggers below, so no path can forget it. It is statement-level, with transition tables, so one
-- statement takes each slot row's lock once and in (tenant, key) order: two
-- finishing batches holding slots of two keys in opposite orders would
-- otherwise deadlock. Unkeyed batches cost it one scan of the transition
-- table and nothing else.
--
-- A task the claim finds over its key's limit is parked: it stays `queued`
-- (so every user action sees it waiting) but leaves the runnable index, so a
-- saturated key's backlog is never re-read by later claims and never blocks
-- other keys or tenants. Each freed slot wakes one parked task (lowest vtime
-- first, so it keeps its place); the sweep also wakes parked tasks of keys
-- with room (a raised limit, a wake skipped because the row was locked).
alter table tasks
  add column concurrency_key text,
  add column concurrency_limit integer,
  add column parked boolean not null default false,
  add constraint tasks_concurrency_pair check ((concurrency_key is null) = (concurrency_limit is null)),
  add constraint tasks_concurrency_key_length check (char_length(concurrency_key) between 1 and 256),
  add constraint tasks_concurrency_limit_range check (concurrency_limit between 1 and 1000);
-- `parked` means something only while the task is `queued` (both indexes below
-- say so); the promote and the reschedule clear it on the way back in.

create table concurrency_slots (
  tenant      text not null,
  key         text not null,
  max_running integer not null,
  running     integer not null default 0,
  -- Scratch of the claim statement: how many slots its upsert granted.
  granted     integer not null default 0,
  updated_at  timestamptz not null default now(),
  primary key (tenant, key),
  constraint concurrency_slots_max_running_range check (max_running between 1 and 1000),
  constraint concurrency_slots_running_range check (running >= 0)
);

-- Parked tasks leave the runnable index (claims scan only what they may take).
drop index tasks_runnable_idx;
create index tasks_runnable_idx on tasks (queue, vtime, id) where status = 'queued' and not parked;
create index tasks_parked_idx on tasks (tenant, concurrency_key, vtime, id) where status = 'queued' and parked;

-- Priorities (-10..10) choose which of a tenant's tasks fills the claim
-- slots its fair-queuing vtimes earned (the claim swaps the vtimes, so a
-- tenant's share never changes). The claim reads each tenant's best runnable
-- tasks (priority, then due time) from this index, stopping at its share of
-- the batch.
alter table tasks
  add column priority smallint not null default 0,
  add constraint tasks_priority_range check (priority between -10 and 10);
create index tasks_runnable_priority_idx on tasks (queue, tenant, priority desc, run_at, id)
  where status = 'queued' and not parked;

-- Frees n slots of one key and wakes up to n of its parked tasks, lowest
-- vtime first (so a woken task keeps its place).
create function concurrency_slots_free(p_tenant text, p_key text, n integer) returns void language plpgsql as $$
begin
  update concurrency_slots set running = greatest(0, running - n), updated_at = now()
  where tenant = p_tenant and key = p_key;
  update tasks t set parked = false
  where t.id in (select p.id from tasks p
                 where p.status = 'queued' and p.parked and p.tenant = p_tenant and p.concurrency_key = p_key
                 order by p.vtime, p.id
                 limit n
                 for update skip locked);
end $$;

create function tasks_free_concurrency_slots() returns trigger language plpgsql as $$
declare
  f record;
begin
  for f in
    select o.tenant, o.concurrency_key as key, count(*)::int as n
    from old_rows o join new_rows n on n.id = o.id
    where o.status = 'running' and o.concurrency_key is not null and n.status <> 'running'
    group by o.tenant, o.concurrency_key
    order by o.tenant, o.concurrency_key
  loop
    perform concurrency_slots_free(f.tenant, f.key, f.n);
  end loop;
  return null;
end $$;

create trigger tasks_free_concurrency_slots after update on tasks
  referencing old table as old_rows new table as new_rows
  for each statement execute function tasks_free_concurrency_slots();

-- A claimed task deleted (a schedule replaced or paused withdraws its
-- occurrences claimed early) gives its slot back too.
create function tasks_free_concurrency_slots_of_deleted() returns trigger language plpgsql as $$
declare
  f record;
begin
  for f in
    select o.tenant, o.concurrency_key as key, count(*)::int as n
    from old_rows o
    where o.status = 'running' and o.concurrency_key is not null
    group by o.tenant, o.concurrency_key
    order by o.tenant, o.concurrency_key
  loop
    perform concurrency_slots_free(f.tenant, f.key, f.n);
  end loop;
  return null;
end $$;

create trigger tasks_free_concurrency_slots_of_deleted after delete on tasks
  referencing old table as old_rows
  for each statement execute function tasks_free_concurrency_slots_of_deleted();
