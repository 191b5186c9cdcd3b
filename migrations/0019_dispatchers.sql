-- 0019: dispatcher slots (issue 13): continuous, parallel dispatch.
--
-- Besides the cron sweep, "pump" invocations (Queue messages the dispatcher
-- sends itself) claim and send due work while a backlog lasts. Each
-- dispatcher, the sweep's dispatch step included, holds one of these slots
-- while it claims and sends; MAX_DISPATCHERS (at most 64) says how many of
-- them may be held at once, so a backlog cannot open more connections to
-- Postgres than that. A slot is taken with FOR UPDATE SKIP LOCKED (two
-- dispatchers arriving at once take different slots), held under a lease and
-- a token of its own, and given back by its token. A dispatcher that dies
-- holds its slot until the lease runs out, never longer: its claims are the
-- reaper's as before (nothing in this table guards a task).
create table dispatcher_slots (
  slot        integer primary key,
  -- The holding dispatcher's lease token; null when free.
  token       uuid,
  holder      text,
  acquired_at timestamptz,
  expires_at  timestamptz not null default '-infinity',
  constraint dispatcher_slots_slot_range check (slot between 0 and 63)
);
insert into dispatcher_slots (slot) select generate_series(0, 63);
