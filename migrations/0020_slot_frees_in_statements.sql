-- 0020: concurrency slots are freed by the statements that take a task out
-- of `running`, not by triggers (issue 12).
--
-- The statement-level triggers of migration 0016 fired for every UPDATE and
-- DELETE of tasks, keyed or not, and built transition tables of every row it
-- touched: the plain drain paid them on every claim, start, finish and
-- promote. Each statement that can leave `running` now calls
-- concurrency_slots_free itself, once per key, for the rows it took out of
-- `running` that carried a key (the claim gave each of them a slot):
-- - set-based statements through one shared CTE (freeSlotsOf in
--   src/db/sql), over the rows they know were running: by their guard
--   (finish, reaper, release, refused start), by DELETE ... RETURNING (the
--   deleted version), or by the status their FOR UPDATE read returned (the
--   latest version, which they then update under that lock: cancels);
-- - the enqueue's ON CONFLICT DO UPDATE, which undoes an early claim, in its
--   SET list, where `t` is the locked latest version of the row.
-- The ledger and the wake are those of migration 0018: a free is an insert
-- into concurrency_frees, and wakes up to n parked tasks of the key.
drop trigger tasks_free_concurrency_slots on tasks;
drop trigger tasks_free_concurrency_slots_of_deleted on tasks;
drop function tasks_free_concurrency_slots();
drop function tasks_free_concurrency_slots_of_deleted();
drop function concurrency_slots_free(text, text, integer);

-- Frees n slots of one key (the ledger: the key's next claim counts them) and
-- wakes up to n of its parked tasks, lowest vtime first. Returns n.
-- `spare_keys`: idempotency keys whose tasks the wake must leave alone. The
-- enqueue calls this from its ON CONFLICT clause, in the middle of the
-- statement; a task it woke there and a later item of the same batch then
-- rewrote would be a row changed twice by one statement, which Postgres
-- refuses. Those tasks are rescheduled by the enqueue anyway (unparked).
-- Set-based callers call it after their writes (see freeSlotsOf) and pass null.
create function concurrency_slots_free(p_tenant text, p_key text, n integer, spare_keys text[])
returns integer language plpgsql volatile as $$
begin
  insert into concurrency_frees (tenant, key, n) values (p_tenant, p_key, n);
  if exists (select 1 from tasks p
             where p.status = 'queued' and p.parked and p.tenant = p_tenant and p.concurrency_key = p_key) then
    update tasks t set parked = false
    where t.id in (select p.id from tasks p
                   where p.status = 'queued' and p.parked and p.tenant = p_tenant and p.concurrency_key = p_key
                     and (spare_keys is null or p.idempotency_key is null
                          or p.idempotency_key <> all (array_remove(spare_keys, null)))
                   order by p.vtime, p.id
                   limit n
                   for update skip locked);
  end if;
  return n;
end $$;
