-- 0003: cheaper fenced writes, from the measurements in BENCHMARKS.md.
--
-- The running-lease index was keyed by lease_expires_at, so every write of a
-- lease (the dispatch mark, the fenced start, a heartbeat) was a non-HOT
-- update touching every index of the table; and its `status = 'running'`
-- predicate let the planner answer the fenced writes (id = any(...) and
-- status = 'running') by scanning every running task when statistics had
-- been taken while nothing ran (10,100 rows read for a 100-task mark with
-- 10,000 in flight). An index of running tasks keyed by id serves both the
-- reaper (it reads the few tasks in flight and sorts them by lease) and id
-- lookups, and leaves the lease columns unindexed: the mark, the start and
-- heartbeats become HOT-eligible.
drop index tasks_lease_idx;
create index tasks_running_idx on tasks (id) where status = 'running';

-- The schedule foreign key fired a per-row trigger on every inserted task
-- (about 5 ms per 1,000, almost none of them occurrences). Occurrences keep
-- their schedule_id as history when a schedule is deleted (its occurrences
-- that had not started are cancelled with it).
alter table tasks drop constraint tasks_schedule_id_fkey;

-- Room on each page for HOT updates (the table's rows are transient: retention deletes them).
alter table tasks set (fillfactor = 70);
