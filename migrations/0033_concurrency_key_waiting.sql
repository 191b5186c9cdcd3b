-- 0033: the purge of idle concurrency keys asks for waiting tasks only (issue 16).
--
-- A key's slot row was forgotten once no task of the key was left, asked of
-- tasks_concurrency_key_idx (0022), which held every keyed task. Each of a
-- keyed task's non-HOT updates (the claim, the finish, a park and its wake)
-- wrote an entry in it, for one question asked when a task is purged.
--
-- A key is idle once nothing of it runs and nothing waits: the slot row's
-- running count, less the frees no claim has counted yet, says the first
-- (every task that leaves `running` writes a free); this index says the
-- second. It holds the waiting tasks alone (scheduled and queued), so the
-- claim and the finish write no entry in it. A key whose tasks all finished
-- is now idle too: nothing is held under it, and the next task of the key
-- writes its limit afresh, as on first use.
--
-- Drain of 10,000 tasks under one key of limit 1,000 (BENCHMARKS.md, issue
-- 16): 2,525 B of WAL per task before, 2,252-2,372 after (plain: 1,271).
--
-- `if not exists`: on a large table, build it first by hand with
-- `create index concurrently` under this name (check it is valid), then drop
-- the old one with `drop index concurrently`.
create index if not exists tasks_concurrency_key_waiting_idx on tasks (tenant, concurrency_key)
  where concurrency_key is not null and status in ('scheduled', 'queued');
drop index if exists tasks_concurrency_key_idx;
