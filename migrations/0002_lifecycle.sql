-- 0002: lifecycle helpers that must hold whoever writes.

-- Retry delay: exponential backoff with full jitter and a cap. The one
-- definition used by the consumer's finish and by the reaper, so a failed
-- attempt waits the same however it was noticed. `attempt` is the attempt
-- that just failed (1 for the first).
create function task_backoff_ms(base_ms integer, max_ms integer, attempt integer)
returns double precision
language sql volatile parallel safe
as $$
  select random() * least(max_ms::double precision,
                          base_ms::double precision * power(2::double precision, greatest(attempt, 1) - 1))
$$;

-- A spent idempotency key is never resurrected, not even after retention has
-- deleted its task (the purge moves the key to spent_idempotency_keys in the
-- statement that deletes the row). An enqueue reads spent keys in its own
-- snapshot; this trigger closes the race with a purge that commits while the
-- enqueue waits on the old row: it runs after the insert with a fresh
-- snapshot, and refuses the row with SQLSTATE TQ001, which the enqueue
-- answers by reading the spent key.
create function tasks_refuse_spent_idempotency_key() returns trigger
language plpgsql volatile
as $$
begin
  if exists (select 1 from spent_idempotency_keys
             where tenant = new.tenant and idempotency_key = new.idempotency_key) then
    raise exception 'idempotency key % was spent', new.idempotency_key using errcode = 'TQ001';
  end if;
  return null;
end
$$;

create trigger tasks_refuse_spent_idempotency_key
  after insert on tasks
  for each row when (new.idempotency_key is not null)
  execute function tasks_refuse_spent_idempotency_key();
