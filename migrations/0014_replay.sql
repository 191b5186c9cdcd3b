-- 0014: replay (issue 15). A replay is a new task carrying the id of the
-- terminal task it repeats; the original never changes (terminal rows are
-- immutable).
--
-- At most one replay per task: the unique index makes a replay idempotent
-- (a retried POST, or two bulk-replays racing over the same filter, create
-- one replay, never two) and lets a bulk-replay continue where the previous
-- call stopped by skipping originals that already have one. To run a task a
-- third time, replay its replay. No foreign key: retention deletes originals
-- and replays independently, and a foreign key would fire a trigger per
-- inserted task (migration 0003 dropped the schedule's for that reason).
-- Partial, so the index holds replays only and plain enqueues never touch it.
alter table tasks add column replay_of bigint;
create unique index tasks_replay_of_key on tasks (replay_of) where replay_of is not null;
