-- 0023: a rate-limited key's start line in a row of its own (issue 16's bench).
--
-- The claim line (rate_limits.next_claim_at) and the start line
-- (next_start_at) shared one row per key, so every claim of a key (the
-- sweeps) and every fenced start (the consumers) queued on that row's lock,
-- held until each commit: with the rate limit never binding, the rated drain
-- ran at 0.5-0.7x the plain one, and its top wait was that lock. The two
-- lines never read each other, so they need not share a row: the start line
-- moves here and claims and starts no longer wait for each other. The start
-- still reads the key's limit and period from rate_limits (unlocked: the
-- latest claim's).
create table rate_start_lines (
  tenant        text not null,
  key           text not null,
  next_start_at timestamptz not null default '-infinity',
  -- Scratch of the fenced start: the line as the statement found it.
  start_from    timestamptz not null default '-infinity',
  updated_at    timestamptz not null default now(),
  primary key (tenant, key)
);
insert into rate_start_lines (tenant, key, next_start_at)
select tenant, key, next_start_at from rate_limits where next_start_at > '-infinity';
alter table rate_limits drop column next_start_at, drop column start_from;
