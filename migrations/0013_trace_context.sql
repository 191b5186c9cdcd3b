-- 0013: W3C trace context carried from enqueue to delivery (issue 17).
--
-- The `traceparent` and `tracestate` headers of the enqueue request are kept
-- with the task, so each attempt's http delivery can send a child
-- `traceparent` of the caller's trace, and the consumer's log lines carry its
-- trace id. Nullable, without a default: adding them rewrites nothing, and a
-- task enqueued without a trace stores nothing.
alter table tasks
  add column traceparent text,
  add column tracestate text,
  add constraint tasks_traceparent_format
    check (traceparent is null or traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
  add constraint tasks_tracestate_length check (tracestate is null or length(tracestate) <= 512);
