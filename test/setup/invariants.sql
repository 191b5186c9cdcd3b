-- Test-only: installed on the template database the tests clone, never by
-- the migrations. Raises on an illegal task transition, so every test checks
-- RELIABILITY.md's I3-I5 for free, and keeps an append-only log of
-- transitions that makes I1, I2 and I7 plain SQL.

create table task_events (
  seq         bigint generated always as identity primary key,
  task_id     bigint not null,
  epoch       bigint not null,
  from_status text,
  to_status   text not null,
  attempts    integer not null,
  at          timestamptz not null default clock_timestamp()
);

create function tasks_check_transition() returns trigger language plpgsql as $$
declare
  terminal constant text[] := array['succeeded', 'dead', 'cancelled', 'missed'];
  legal constant text[] := array[
    'scheduled>queued', 'scheduled>scheduled', 'scheduled>cancelled', 'scheduled>missed',
    'queued>running', 'queued>queued', 'queued>scheduled', 'queued>cancelled',
    'running>running', 'running>succeeded', 'running>dead', 'running>scheduled', 'running>queued',
    'running>cancelled'];
begin
  if old.status = any(terminal) then
    if row(new.*) is distinct from row(old.*) then
      raise exception 'I5: task % left or changed terminal state % (to %)', old.id, old.status, new.status;
    end if;
    return new;
  end if;
  if not (old.status || '>' || new.status) = any(legal) then
    raise exception 'illegal transition % -> % for task %', old.status, new.status, old.id;
  end if;
  if new.lease_epoch < old.lease_epoch then
    raise exception 'I3: epoch of task % went down (% -> %)', old.id, old.lease_epoch, new.lease_epoch;
  end if;
  -- Besides a claim, one transition bumps the epoch: an early claim undone
  -- before its start (issue 11: reschedule by key), back to waiting with the
  -- claim's attempt refunded.
  if new.lease_epoch <> old.lease_epoch
     and not (old.status = 'queued' and new.status = 'running' and new.lease_epoch = old.lease_epoch + 1)
     and not (old.status = 'running' and old.started_at is null and new.status in ('scheduled', 'queued')
              and new.lease_epoch = old.lease_epoch + 1 and new.attempts = old.attempts - 1) then
    raise exception 'I3: epoch of task % changed outside a claim (% -> %, % -> %)',
      old.id, old.lease_epoch, new.lease_epoch, old.status, new.status;
  end if;
  if old.status = 'queued' and new.status = 'running' and new.lease_epoch <> old.lease_epoch + 1 then
    raise exception 'I3: claim of task % did not bump its epoch', old.id;
  end if;
  if new.attempts < old.attempts
     and not (old.status = 'running' and new.status = 'queued' and new.attempts = old.attempts - 1)
     and not (old.status = 'running' and old.started_at is null and new.status = 'scheduled'
              and new.lease_epoch = old.lease_epoch + 1 and new.attempts = old.attempts - 1) then
    raise exception 'I4: attempts of task % went down (% -> %)', old.id, old.attempts, new.attempts;
  end if;
  if new.attempts > old.attempts
     and not (old.status = 'queued' and new.status = 'running' and new.attempts = old.attempts + 1) then
    raise exception 'I4: attempts of task % grew outside a claim', old.id;
  end if;
  return new;
end $$;

create trigger tasks_check_transition before update on tasks
  for each row execute function tasks_check_transition();

create function tasks_log_event() returns trigger language plpgsql as $$
begin
  if tg_op = 'INSERT' then
    insert into task_events (task_id, epoch, from_status, to_status, attempts)
    values (new.id, new.lease_epoch, null, new.status, new.attempts);
  elsif new.status is distinct from old.status then
    insert into task_events (task_id, epoch, from_status, to_status, attempts)
    values (new.id, new.lease_epoch, old.status, new.status, new.attempts);
  end if;
  return null;
end $$;

create trigger tasks_log_event after insert or update on tasks
  for each row execute function tasks_log_event();
