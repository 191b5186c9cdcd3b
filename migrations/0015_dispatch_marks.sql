-- 0015: the dispatch mark is one row per claimed batch (issue 12).
--
-- The sweep used to record a hand-off to the Queue by updating every task of
-- the batch (dispatched_at and a longer lease): one row version per task, and
-- a lock in id order first so that the mark and a consumer's fenced start
-- over the same tasks could not deadlock. Now the claim writes a per-batch
-- token on each task (it writes the row anyway), and after sendBatch the
-- sweep inserts one dispatch_marks row for the token. Nothing reads the mark
-- on the hot path: the fenced start copies its time into dispatched_at, the
-- reaper reads it only for tasks whose claim lease ran out before they
-- started, and task reads show it for tasks claimed but not started.
--
-- Existing rows need nothing: a task marked under the old scheme keeps its
-- dispatched_at (the reaper still honours it) and has no token.
alter table tasks add column claim_token uuid;

create table dispatch_marks (
  claim_token   uuid primary key,
  dispatched_at timestamptz not null
);
-- The sweep's purge deletes marks past every lease they could extend, oldest first.
create index dispatch_marks_dispatched_at_idx on dispatch_marks (dispatched_at);
