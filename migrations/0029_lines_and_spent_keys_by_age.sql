-- 0029: spent idempotency keys and rate lines by age (issue 12).
--
-- Every sweep, an idle tick too, starts with one probe that asks each step
-- whether it has work, the purge included: "is a spent key older than its
-- retention?", "is a rate line past by the retention?". These three tables
-- had no index but their primary keys, so the probe read each of them whole
-- to learn that nothing in it was old enough, and the purge did the same to
-- find its batch. They grow with use, not with the load: one spent key per
-- purged task that had an idempotency key, kept SPENT_KEY_RETENTION_SECONDS
-- (when set), and one row per rate key used within RETENTION_SECONDS (a key
-- per user is the common shape). PostgreSQL 15, the probe's arms alone:
-- 145-153 ms a probe at 1,000,000 spent keys within a 30-day retention, and
-- 26 ms at 100,000 rate keys within the default 7 days.
--
-- spent_at is written once, with the row. A line moves at each claim or
-- start of its key, which now writes an index entry per key per statement
-- (not per task: a claim or start updates each key's row once); those
-- updates were HOT before; the rated drain measured no change.
--
-- `if not exists`: on a large table, build them first by hand with
-- `create index concurrently` under these names (writes go on meanwhile);
-- the migration then keeps them (check they are valid: a failed concurrent
-- build leaves an invalid index to drop).
create index if not exists spent_idempotency_keys_spent_at_idx on spent_idempotency_keys (spent_at);
create index if not exists rate_limits_next_claim_at_idx on rate_limits (next_claim_at);
create index if not exists rate_start_lines_next_start_at_idx on rate_start_lines (next_start_at);
