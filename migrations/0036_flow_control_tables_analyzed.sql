-- 0036 (flow_control_tables_analyzed): the flow-control tables analyzed, so
-- an unused one plans as empty.
--
-- The claim's flow filter probes concurrency_slots (and, for a full key,
-- concurrency_frees) for each runnable task it passes. A table never
-- analyzed is planned as if it held ten pages, about 2,500 rows: the probe
-- looked 16 cost units a task, and the claim's scan in vtime order, charged
-- that for every task of the queue, lost to a bitmap over the whole backlog
-- and a sort (beside 1,000,000 finished tasks and 20,000 queued, it did on 2
-- and 3 of 15 samples of the statistics on PostgreSQL 18 and 15). A
-- deployment that uses rate limits but no concurrency key never writes
-- concurrency_slots, so autovacuum never analyzes it. Analyzed empty, the
-- planner sizes them by their pages as they grow, and autovacuum analyzes
-- them once they change.
analyze concurrency_slots;
analyze concurrency_frees;
