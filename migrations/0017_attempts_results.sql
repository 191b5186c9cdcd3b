-- 0017: attempt history and results (issue 15).
--
-- One row per attempt that ended, written by the statement that ended it (the
-- consumer's fenced finish, the reaper, the fenced start for a message it
-- skipped): a CTE insert, so no round trip is added per task or per batch.
-- Retention deletes a task's attempts in the statement that deletes the task
-- (tasks_purge_finished), as do the schedule statements that delete planned
-- occurrences. No foreign key: its check would lock every finished task's row
-- once more (a heap lock record per task in the WAL of the hot path), and the
-- deletes name the rows themselves. Read only through the task, whose tenant
-- the reading statement checks, so the row carries no tenant.
--
-- No primary key: a duplicate message can be skipped at the epoch of an
-- attempt that later finishes, so (task_id, epoch) is not unique; order is
-- by finished_at (ties by epoch), the clock of the statement that wrote it.
create table task_attempts (
  task_id        bigint not null,
  attempt        integer not null,
  epoch          bigint not null,
  outcome        text not null,
  started_at     timestamptz,
  finished_at    timestamptz not null,
  -- The error's name and message, cut by the writer to 2 KiB together.
  error_name     text,
  error_message  text,
  -- For http tasks: the response status, when a response came.
  http_status    smallint,
  constraint task_attempts_outcome check (outcome in ('succeeded', 'failed', 'timed_out', 'lease_expired', 'cancelled', 'skipped_stale'))
);
create index task_attempts_task_idx on task_attempts (task_id, finished_at);

-- A handler's return value (any JSON, at most 64 KiB: the consumer fails the
-- attempt otherwise), written by the finish that records the success.
alter table tasks add column result jsonb;
