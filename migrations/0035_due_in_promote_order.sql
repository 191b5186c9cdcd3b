-- 0035: the scheduled tasks in the promote's order, (run_at, id).
--
-- The promote takes the due tasks in (run_at, id) order, up to its batch.
-- tasks_due_idx held run_at alone, so among tasks due at one instant (a
-- batch enqueued for 09:00, a schedule's fan-out) the index could not give
-- the id order: each promote read every task due by then and sorted them,
-- 20,000 rows for a batch of 1,000 beside 20,000 due at once. With id in the
-- key the scan stops at the batch. The probe and the reads of the due
-- backlog by run_at use it as they used the old one.
--
-- `if not exists`: on a large table, build it first by hand with
-- `create index concurrently` under this name (check it is valid), then drop
-- the old one with `drop index concurrently`.
create index if not exists tasks_due_order_idx on tasks (run_at, id) where status = 'scheduled';
drop index if exists tasks_due_idx;
