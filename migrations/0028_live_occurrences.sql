-- 0028: a schedule's live occurrences by index (issue 12).
--
-- The materialization asks, for each due schedule, whether an occurrence of
-- it is still waiting or running (`busy`, for overlap = 'skip'). The only
-- index by schedule was tasks_schedule_occurrence_key, which holds every
-- occurrence, finished ones included, so the answer read the schedule's whole
-- history, or (hashed over the batch of schedules) the whole table: 12.8 ms a
-- sweep at 100,000 finished occurrences of ten schedules, growing with the
-- retention. Only occurrences are in this index, and only while live: a task
-- without a schedule writes no entry, an occurrence one at its insert and one
-- at its claim, and none once it has finished.
create index tasks_live_occurrences_idx on tasks (schedule_id)
  where status in ('scheduled', 'queued', 'running') and schedule_id is not null;
