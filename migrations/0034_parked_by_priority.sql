-- 0034: a freed slot wakes its key's parked tasks by priority, then virtual
-- time (issue 16).
--
-- Since the enqueue and the promote park a task made runnable under a full
-- key (parked_if_key_full), most of a saturated key's waiting tasks wait
-- parked, and the wake chooses which of them goes next. It woke them in
-- virtual-time order, so a priority 10 task enqueued into a full key behind
-- 1,000 of priority 0 waited for 1,000 frees; runnable, the claim would have
-- taken it first (the tenant's best by priority, then due time). The wakes
-- (concurrency_slots_free here, tasks_wake_parked in the sweep) now read the
-- key's parked tasks in (priority desc, vtime, id) order, from this index:
-- the first n of it, not a sort of them all.
--
-- `if not exists`: on a large table, build it first by hand with
-- `create index concurrently` under this name (check it is valid), then drop
-- the old one with `drop index concurrently`.
create index if not exists tasks_parked_priority_idx on tasks (tenant, concurrency_key, priority desc, vtime, id)
  where status = 'queued' and parked;
drop index if exists tasks_parked_idx;

create or replace function concurrency_slots_free(p_tenant text, p_key text, n integer, spare_keys text[])
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
                   order by p.priority desc, p.vtime, p.id
                   limit n
                   for update skip locked);
  end if;
  return n;
end $$;
