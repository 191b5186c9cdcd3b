// Guard mutants: for every guard in a runtime statement or a migration, the
// edit that removes or weakens it, and the tests that must then fail.
// `npm run test:mutants` (scripts/mutants.ts) applies each to a scratch copy
// and runs only its tests; a mutant whose tests stay green fails the command.
// Nothing in production imports this file.
//
// Adding a guarded statement? Add one entry per guard. `find` must occur
// exactly once in `file` (the command refuses a stale list), so include
// enough of the statement to make it unique. Keep every bind parameter
// referenced: a tenant filter becomes `$1::text is not null`, not nothing
// (Postgres refuses a statement with a parameter whose type it cannot infer).

export interface Edit {
  /** Path from the repository root. */
  file: string;
  /** Text that occurs exactly once in `file`. */
  find: string;
  replace: string;
}

export interface Mutant extends Edit {
  /** Unique, kebab-case: statement, then guard. */
  id: string;
  /** The sql() name, or the migration object. */
  statement: string;
  /** What the edit removes or weakens. */
  guard: string;
  /** Further edits applied with this one (a guard kept in two places). */
  also?: Edit[];
  /** Test files expected to catch it (run with vitest run <files>). */
  tests: string[];
  /** Optional vitest -t filter. */
  testName?: string;
}

const TASKS = 'src/db/sql/tasks.ts';
const SCHEDULES = 'src/db/sql/schedules.ts';
const TENANTS = 'src/db/sql/tenants.ts';

export const mutants: Mutant[] = [
  // -------------------------------------------------------------------------
  // Fenced writes: the epoch, the status and the started_at conditions.
  {
    id: 'mark-epoch',
    file: TASKS,
    statement: 'tasks_mark_dispatched_if_running',
    guard: 'the lease epoch',
    find: `where t.id = l.id and t.lease_epoch = sent.epoch and t.status = 'running' and t.started_at is null`,
    replace: `where t.id = l.id and t.status = 'running' and t.started_at is null`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'mark-status',
    file: TASKS,
    statement: 'tasks_mark_dispatched_if_running',
    guard: `status = 'running'`,
    find: `where t.id = l.id and t.lease_epoch = sent.epoch and t.status = 'running' and t.started_at is null`,
    replace: `where t.id = l.id and t.lease_epoch = sent.epoch and t.started_at is null`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'mark-not-started',
    file: TASKS,
    statement: 'tasks_mark_dispatched_if_running',
    guard: 'started_at is null (a consumer quicker than the mark)',
    find: `where t.id = l.id and t.lease_epoch = sent.epoch and t.status = 'running' and t.started_at is null`,
    replace: `where t.id = l.id and t.lease_epoch = sent.epoch and t.status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'release-epoch',
    file: TASKS,
    statement: 'tasks_release_if_undispatched',
    guard: 'the lease epoch',
    find: `where t.id = l.id and t.lease_epoch = c.epoch and t.status = 'running'
     and t.dispatched_at is null and t.started_at is null`,
    replace: `where t.id = l.id and t.status = 'running'
     and t.dispatched_at is null and t.started_at is null`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'release-status',
    file: TASKS,
    statement: 'tasks_release_if_undispatched',
    guard: `status = 'running'`,
    find: `where t.id = l.id and t.lease_epoch = c.epoch and t.status = 'running'
     and t.dispatched_at is null and t.started_at is null`,
    replace: `where t.id = l.id and t.lease_epoch = c.epoch
     and t.dispatched_at is null and t.started_at is null`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    // Either condition alone is redundant (a start always sets dispatched_at;
    // a sweep's own mark comes after its release): removed together.
    id: 'release-not-dispatched',
    file: TASKS,
    statement: 'tasks_release_if_undispatched',
    guard: 'dispatched_at is null and started_at is null (the send delivered, then reported failure)',
    find: `where t.id = l.id and t.lease_epoch = c.epoch and t.status = 'running'
     and t.dispatched_at is null and t.started_at is null`,
    replace: `where t.id = l.id and t.lease_epoch = c.epoch and t.status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'start-epoch',
    file: TASKS,
    statement: 'tasks_start_if_claimed',
    guard: 'the lease epoch',
    find: `where t.id = l.id and t.lease_epoch = msg.epoch and t.status = 'running' and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    replace: `where t.id = l.id and t.status = 'running' and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    tests: ['test/tasks/fencing.test.ts', 'test/tasks/faults.test.ts'],
  },
  {
    id: 'start-status',
    file: TASKS,
    statement: 'tasks_start_if_claimed',
    guard: `status = 'running' (a cancelled task already sent)`,
    find: `where t.id = l.id and t.lease_epoch = msg.epoch and t.status = 'running' and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    replace: `where t.id = l.id and t.lease_epoch = msg.epoch and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'start-not-started',
    file: TASKS,
    statement: 'tasks_start_if_claimed',
    guard: 'started_at is null (a duplicate delivery)',
    find: `where t.id = l.id and t.lease_epoch = msg.epoch and t.status = 'running' and t.started_at is null
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    replace: `where t.id = l.id and t.lease_epoch = msg.epoch and t.status = 'running'
       and not exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'finish-epoch',
    file: TASKS,
    statement: 'tasks_finish_if_running',
    guard: 'the lease epoch',
    find: `where t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'`,
    replace: `where t.id = d.id and t.status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'finish-status',
    file: TASKS,
    statement: 'tasks_finish_if_running',
    guard: `status = 'running'`,
    find: `where t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'`,
    replace: `where t.id = d.id and t.lease_epoch = d.epoch`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'heartbeat-epoch',
    file: TASKS,
    statement: 'tasks_extend_lease_if_running',
    guard: 'the lease epoch',
    find: `where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'`,
    replace: `where id = $2::bigint and $3::bigint is not null and status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'heartbeat-status',
    file: TASKS,
    statement: 'tasks_extend_lease_if_running',
    guard: `status = 'running'`,
    find: `where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'`,
    replace: `where id = $2::bigint and lease_epoch = $3::bigint`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'claim-epoch-bump',
    file: TASKS,
    statement: 'tasks_claim_runnable',
    guard: 'every claim bumps the epoch',
    find: `lease_epoch = t.lease_epoch + 1,`,
    replace: `lease_epoch = greatest(t.lease_epoch, 1),`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'claim-status',
    file: TASKS,
    statement: 'tasks_claim_runnable',
    guard: `status = 'queued'`,
    find: `where t.status = 'queued' and t.queue = $2::text`,
    replace: `where t.status in ('queued', 'scheduled') and t.queue = $2::text`,
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'claim-paused',
    file: TASKS,
    statement: 'tasks_claim_runnable',
    guard: 'a paused queue yields nothing',
    find: `and not exists (select 1 from queues q where q.name = $2::text and q.paused)`,
    replace: `and not exists (select 1 from queues q where q.name = $2::text and false)`,
    tests: ['test/tenants/fairness.test.ts'],
  },
  {
    id: 'reap-expired',
    file: TASKS,
    statement: 'tasks_reap_expired',
    guard: 'only leases that expired',
    find: `where t.status = 'running' and t.lease_expires_at < clock.now`,
    replace: `where t.status = 'running' and t.lease_expires_at < clock.now + interval '10 minutes'`,
    tests: ['test/sweep/maintenance.test.ts', 'test/tasks/fencing.test.ts'],
  },

  // -------------------------------------------------------------------------
  // What a failed attempt becomes: at-most-once is never retried (finish and
  // reaper alike), and a task is dead after exactly max_attempts claims (I4).
  {
    id: 'finish-at-most-once',
    file: TASKS,
    statement: 'tasks_finish_if_running',
    guard: 'a failed at_most_once attempt is not retried',
    find: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'`,
    replace: `when r.outcome = 'failed' and t.attempts < t.max_attempts then 'scheduled'`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'finish-attempts-left',
    file: TASKS,
    statement: 'tasks_finish_if_running',
    guard: 'retry only while attempts remain',
    find: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'`,
    replace: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts <= t.max_attempts then 'scheduled'`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'reap-at-most-once',
    file: TASKS,
    statement: 'tasks_reap_expired',
    guard: 'an at_most_once task handed off is never handed off again',
    find: `when t.delivery = 'at_most_once' then 'dead'`,
    replace: `when false then 'dead'`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'reap-attempts-left',
    file: TASKS,
    statement: 'tasks_reap_expired',
    guard: 'retry only while attempts remain',
    find: `when t.attempts < t.max_attempts then 'scheduled'`,
    replace: `when t.attempts <= t.max_attempts then 'scheduled'`,
    tests: ['test/sweep/maintenance.test.ts'],
  },

  {
    id: 'backoff-cap',
    file: 'migrations/0002_lifecycle.sql',
    statement: 'function task_backoff_ms',
    guard: 'the cap (backoff max)',
    find: `select random() * least(max_ms::double precision,`,
    replace: `select random() * greatest(max_ms::double precision,`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'backoff-exponent',
    file: 'migrations/0002_lifecycle.sql',
    statement: 'function task_backoff_ms',
    guard: 'base for the first retry, doubling after',
    find: `power(2::double precision, greatest(attempt, 1) - 1)`,
    replace: `power(2::double precision, greatest(attempt, 1))`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'backoff-jitter',
    file: 'migrations/0002_lifecycle.sql',
    statement: 'function task_backoff_ms',
    guard: 'full jitter (a random wait in [0, cap])',
    find: `select random() * least(max_ms::double precision,`,
    replace: `select (0.5 + random() / 2) * least(max_ms::double precision,`,
    tests: ['test/tasks/retries.test.ts'],
  },

  // -------------------------------------------------------------------------
  // Cancel: not after the start; tenant-scoped.
  {
    id: 'cancel-not-started',
    file: TASKS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'started_at is null (409 once the handler runs)',
    find: `or (status = 'running' and started_at is null))`,
    replace: `or (status = 'running'))`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'cancel-waiting-only',
    file: TASKS,
    statement: 'tasks_cancel_if_not_started',
    guard: `status in ('scheduled', 'queued') (terminal states are absorbing)`,
    find: `and (status in ('scheduled', 'queued') or (status = 'running' and started_at is null))`,
    replace: `and (status in ('scheduled', 'queued', 'succeeded', 'dead') or (status = 'running' and started_at is null))`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'cancel-tenant',
    file: TASKS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'the tenant filter',
    find: `where tenant = $2::text
     and id = coalesce(`,
    replace: `where $2::text is not null
     and id = coalesce(`,
    tests: ['test/tasks/cancel.test.ts', 'test/tenants/isolation.test.ts'],
  },
  {
    id: 'cancel-by-key-tenant',
    file: TASKS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'the tenant filter of the by-key lookup',
    find: `(select id from tasks where tenant = $2::text and idempotency_key = $4::text)`,
    replace: `(select id from tasks where idempotency_key = $4::text)`,
    tests: ['test/tasks/cancel.test.ts'],
  },

  // -------------------------------------------------------------------------
  // Tenant filters of reads and writes.
  {
    id: 'get-tenant',
    file: TASKS,
    statement: 'tasks_get',
    guard: 'the tenant filter',
    find: `from tasks where tenant = $1::text and id = $2::bigint`,
    replace: `from tasks where $1::text is not null and id = $2::bigint`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'get-by-key-tenant',
    file: TASKS,
    statement: 'tasks_get_by_key',
    guard: 'the tenant filter',
    find: `from tasks where tenant = $1::text and idempotency_key = $2::text`,
    replace: `from tasks where $1::text is not null and idempotency_key = $2::text`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'list-tenant',
    file: TASKS,
    statement: 'tasks_list_for_tenant',
    guard: 'the tenant filter',
    find: `where tenant = $1::text
     and ($2::text is null or queue = $2::text)`,
    replace: `where $1::text is not null
     and ($2::text is null or queue = $2::text)`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'stats-tenant',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'the tenant filter',
    find: `where t.tenant = $2::text
   group by`,
    replace: `where $2::text is not null
   group by`,
    tests: ['test/tenants/isolation.test.ts', 'test/tenants/fairness.test.ts'],
  },
  {
    id: 'schedule-get-tenant',
    file: SCHEDULES,
    statement: 'schedules_get',
    guard: 'the tenant filter',
    find: `from schedules where tenant = $1::text and name = $2::text\`);`,
    replace: `from schedules where $1::text is not null and name = $2::text\`);`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-get-for-update-tenant',
    file: SCHEDULES,
    statement: 'schedules_get_for_update',
    guard: 'the tenant filter',
    find: `from schedules where tenant = $1::text and name = $2::text for update`,
    replace: `from schedules where $1::text is not null and name = $2::text for update`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-list-tenant',
    file: SCHEDULES,
    statement: 'schedules_list_for_tenant',
    guard: 'the tenant filter',
    find: `where tenant = $1::text and ($2::text is null or name > $2::text)`,
    replace: `where $1::text is not null and ($2::text is null or name > $2::text)`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-set-enabled-tenant',
    file: SCHEDULES,
    statement: 'schedules_set_enabled',
    guard: 'the tenant filter',
    find: `where tenant = $2::text and name = $4::text`,
    replace: `where $2::text is not null and name = $4::text`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-cancel-pending-tenant',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'the tenant filter',
    find: `where s.tenant = $2::text and s.name = $3::text and t.schedule_id = s.id
     and \${NOT_STARTED}
   returning t.id`,
    replace: `where $2::text is not null and s.name = $3::text and t.schedule_id = s.id
     and \${NOT_STARTED}
   returning t.id`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-cancel-pending-not-started',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'started_at is null (a running occurrence is left to finish)',
    find: `and t.schedule_id = s.id
     and \${NOT_STARTED}
   returning t.id`,
    replace: `and t.schedule_id = s.id
     and t.status in ('scheduled', 'queued', 'running')
   returning t.id`,
    tests: ['test/schedules/api.test.ts'],
  },
  {
    id: 'schedule-delete-tenant',
    file: SCHEDULES,
    statement: 'schedules_delete',
    guard: 'the tenant filter',
    find: `delete from schedules where tenant = $1::text and name = $2::text`,
    replace: `delete from schedules where $1::text is not null and name = $2::text`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'api-key-live',
    file: TENANTS,
    statement: 'api_keys_find_live',
    guard: 'revoked_at is null',
    find: `where prefix = $1::text and revoked_at is null`,
    replace: `where prefix = $1::text`,
    tests: ['test/tenants/keys.test.ts'],
  },

  // -------------------------------------------------------------------------
  // SKIP LOCKED in every batch lock: overlapping sweeps take other rows at once.
  {
    id: 'claim-skip-locked',
    file: TASKS,
    statement: 'tasks_claim_runnable',
    guard: 'skip locked',
    find: `order by t.vtime, t.id
     limit $3::int
     for update of t skip locked`,
    replace: `order by t.vtime, t.id
     limit $3::int
     for update of t`,
    tests: ['test/sweep/concurrency.test.ts'],
  },
  {
    id: 'promote-skip-locked',
    file: TASKS,
    statement: 'tasks_promote_due',
    guard: 'skip locked',
    find: `order by t.run_at, t.id
     limit $3::int
     for update of t skip locked`,
    replace: `order by t.run_at, t.id
     limit $3::int
     for update of t`,
    tests: ['test/sweep/concurrency.test.ts'],
  },
  {
    id: 'reap-skip-locked',
    file: TASKS,
    statement: 'tasks_reap_expired',
    guard: 'skip locked',
    find: `order by t.lease_expires_at
     limit $2::int
     for update of t skip locked`,
    replace: `order by t.lease_expires_at
     limit $2::int
     for update of t`,
    tests: ['test/sweep/concurrency.test.ts'],
  },
  {
    id: 'purge-skip-locked',
    file: TASKS,
    statement: 'tasks_purge_finished',
    guard: 'skip locked',
    find: `order by finished_at
     limit $3::int
     for update skip locked`,
    replace: `order by finished_at
     limit $3::int
     for update`,
    tests: ['test/sweep/concurrency.test.ts'],
  },
  {
    id: 'schedule-lock-skip-locked',
    file: SCHEDULES,
    statement: 'schedules_lock_due',
    guard: 'skip locked',
    find: `for update of s skip locked`,
    replace: `for update of s`,
    tests: ['test/sweep/concurrency.test.ts'],
  },

  // -------------------------------------------------------------------------
  // Sweep conditions: what each batch may pick.
  {
    id: 'promote-status',
    file: TASKS,
    statement: 'tasks_promote_due',
    guard: `status = 'scheduled'`,
    find: `where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)`,
    replace: `where t.status in ('scheduled', 'running') and t.run_at <= clock.now + make_interval(secs => $2::int)`,
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'promote-due',
    file: TASKS,
    statement: 'tasks_promote_due',
    guard: 'run_at within the look-ahead',
    find: `where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)`,
    replace: `where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int) + interval '1 hour'`,
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'purge-retention',
    file: TASKS,
    statement: 'tasks_purge_finished',
    guard: 'only past retention',
    find: `and finished_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)`,
    replace: `and finished_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int) + interval '1 hour'`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'schedule-lock-enabled',
    file: SCHEDULES,
    statement: 'schedules_lock_due',
    guard: 'enabled (a paused schedule does not fire)',
    find: `where s.enabled and s.next_run_at is not null`,
    replace: `where s.next_run_at is not null`,
    tests: ['test/schedules/materialize.test.ts'],
  },
  {
    id: 'schedule-lock-overlap-skip',
    file: SCHEDULES,
    statement: 'schedules_lock_due',
    guard: 'overlap = skip is materialized only once due',
    find: `and (s.overlap = 'allow' or s.next_run_at <= coalesce($1::timestamptz, now()))`,
    replace: `and (true or s.next_run_at <= coalesce($1::timestamptz, now()))`,
    tests: ['test/schedules/materialize.test.ts'],
  },

  // -------------------------------------------------------------------------
  // Idempotency keys: unique per tenant, spent keys stay spent.
  {
    id: 'enqueue-spent-tenant',
    file: TASKS,
    statement: 'tasks_insert_batch',
    guard: 'the tenant filter of the spent-key check',
    find: `where s.tenant = $2::text and s.idempotency_key = i.idempotency_key`,
    replace: `where s.idempotency_key = i.idempotency_key`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'enqueue-spent-key-kept',
    file: TASKS,
    statement: 'tasks_insert_batch',
    guard: 'a started or finished task keeps its payload',
    find: `payload    = case when \${NOT_STARTED} then excluded.payload else t.payload end,`,
    replace: `payload    = excluded.payload,`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'enqueue-spent-status-kept',
    file: TASKS,
    statement: 'tasks_insert_batch',
    guard: 'a started or finished task keeps its status (the key is not reused)',
    find: `status     = case when \${NOT_STARTED} then excluded.status else t.status end,`,
    replace: `status     = excluded.status,`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'spent-keys-find-tenant',
    file: TASKS,
    statement: 'spent_idempotency_keys_find',
    guard: 'the tenant filter',
    find: `where tenant = $1::text and idempotency_key = any($2::text[])`,
    replace: `where $1::text is not null and idempotency_key = any($2::text[])`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'spent-key-trigger',
    file: 'migrations/0002_lifecycle.sql',
    statement: 'trigger tasks_refuse_spent_idempotency_key',
    guard: 'a spent key refuses a new row',
    find: `  if exists (select 1 from spent_idempotency_keys`,
    replace: `  if false and exists (select 1 from spent_idempotency_keys`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'spent-key-trigger-tenant',
    file: 'migrations/0002_lifecycle.sql',
    statement: 'trigger tasks_refuse_spent_idempotency_key',
    guard: 'the tenant filter',
    find: `where tenant = new.tenant and idempotency_key = new.idempotency_key`,
    replace: `where idempotency_key = new.idempotency_key`,
    tests: ['test/tasks/idempotency.test.ts'],
  },

  // -------------------------------------------------------------------------
  // One occurrence per schedule fire time.
  {
    id: 'occurrence-key',
    file: 'migrations/0001_data_model.sql',
    statement: 'index tasks_schedule_occurrence_key + schedules_fire_occurrences',
    guard: 'the unique occurrence key and its ON CONFLICT target',
    find: `create unique index tasks_schedule_occurrence_key on tasks (schedule_id, scheduled_for)`,
    replace: `create index tasks_schedule_occurrence_key on tasks (schedule_id, scheduled_for)`,
    also: [
      {
        file: SCHEDULES,
        find: `on conflict (schedule_id, scheduled_for) where schedule_id is not null do nothing`,
        replace: `on conflict do nothing`,
      },
    ],
    tests: ['test/schedules/materialize.test.ts'],
  },
];
