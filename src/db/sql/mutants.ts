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

const TASKS_SHARED = 'src/db/sql/tasks-shared.ts';
const ENQUEUE = 'src/db/sql/tasks-enqueue.ts';
const DISPATCH = 'src/db/sql/tasks-dispatch.ts';
const FENCE = 'src/db/sql/tasks-fence.ts';
const MAINTENANCE = 'src/db/sql/tasks-maintenance.ts';
const TASK_READS = 'src/db/sql/tasks-read.ts';
const SCHEDULES = 'src/db/sql/schedules.ts';
const TENANTS = 'src/db/sql/tenants.ts';
const CONCURRENCY = 'src/db/sql/concurrency.ts';

export const mutants: Mutant[] = [
  // -------------------------------------------------------------------------
  // Completion callbacks: the callback task counts as pending (migration 0024).
  {
    id: 'callback-pending-count',
    file: 'migrations/0024_callback_pending_counts.sql',
    statement: 'tasks_enqueue_callback()',
    guard: 'the callback task it inserts is added to the tenant pending count',
    find: `select new.tenant, pg_backend_pid() % 16, added where added > 0`,
    replace: `select new.tenant, pg_backend_pid() % 16, added where false`,
    tests: ['test/tasks/callbacks.test.ts'],
  },
  // -------------------------------------------------------------------------
  // Fenced writes: the epoch, the status and the started_at conditions.
  {
    id: 'reap-mark-token',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: "the dispatch mark is the claim's own (claim_token): a claim never sent is given back, no attempt spent",
    find: `from tasks t left join dispatch_marks d on d.claim_token = t.claim_token, clock`,
    replace: `from tasks t left join dispatch_marks d on true, clock`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'reap-dispatch-lease',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'dispatch_lease_from_mark: a sent batch holds its unstarted tasks for the dispatch lease',
    find: `and (t.started_at is not null or d.claim_token is null
            or greatest(t.run_at, d.dispatched_at) + make_interval(secs => $3::int) < clock.now)`,
    replace: `and true`,
    tests: ['test/tasks/faults.test.ts', 'test/sweep/maintenance.test.ts'],
  },
  {
    id: 'release-epoch',
    file: DISPATCH,
    statement: 'tasks_release_if_undispatched',
    guard: 'the lease epoch',
    find: `where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)`,
    replace: `where t.id = any($2::bigint[]) and t.id = c.id and t.status = 'running'
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'release-status',
    file: DISPATCH,
    statement: 'tasks_release_if_undispatched',
    guard: `status = 'running'`,
    find: `where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)`,
    replace: `where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    // The conditions that say the batch was not handed off are redundant
    // with each other (a start sets dispatched_at; a sweep's own mark comes
    // after its release): removed together.
    id: 'release-not-dispatched',
    file: DISPATCH,
    statement: 'tasks_release_if_undispatched',
    guard: 'not dispatched, not started, no dispatch mark (the send delivered, then reported failure)',
    find: `where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'
       and t.dispatched_at is null and t.started_at is null
       and not exists (select 1 from dispatch_marks d where d.claim_token = t.claim_token)`,
    replace: `where t.id = any($2::bigint[]) and t.id = c.id and t.lease_epoch = c.epoch and t.status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'start-epoch',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: `the lease epoch`,
    find: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null and t.rate_key is null`,
    replace: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id
       and t.status = 'running' and t.started_at is null and t.rate_key is null`,
    tests: ['test/tasks/fencing.test.ts', 'test/tasks/faults.test.ts'],
  },
  {
    id: 'start-status',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: `\`status = 'running'\` (a cancelled task already sent)`,
    find: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null and t.rate_key is null`,
    replace: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.started_at is null and t.rate_key is null`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'start-not-started',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: `started_at is null (a duplicate delivery)`,
    find: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null and t.rate_key is null`,
    replace: `where t.id = any(\${rated ? NOT_RATE_TASKS : '$2::bigint[]'}) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.rate_key is null`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'finish-epoch',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'the lease epoch',
    find: `where t.id = any($2::bigint[]) and t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'`,
    replace: `where t.id = any($2::bigint[]) and t.id = d.id and t.status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'finish-status',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: `status = 'running'`,
    find: `where t.id = any($2::bigint[]) and t.id = d.id and t.lease_epoch = d.epoch and t.status = 'running'`,
    replace: `where t.id = any($2::bigint[]) and t.id = d.id and t.lease_epoch = d.epoch`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'heartbeat-epoch',
    file: FENCE,
    statement: 'tasks_extend_lease_if_running',
    guard: 'the lease epoch',
    find: `where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'`,
    replace: `where id = $2::bigint and $3::bigint is not null and status = 'running'`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'heartbeat-status',
    file: FENCE,
    statement: 'tasks_extend_lease_if_running',
    guard: `status = 'running'`,
    find: `where id = $2::bigint and lease_epoch = $3::bigint and status = 'running'`,
    replace: `where id = $2::bigint and lease_epoch = $3::bigint`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'claim-epoch-bump',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'every claim bumps the epoch',
    find: `lease_epoch = t.lease_epoch + 1,`,
    replace: `lease_epoch = greatest(t.lease_epoch, 1),`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'claim-status',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "status = 'queued' (in the fair slots and in each tenant's pick by priority)",
    find: `where t.status = 'queued' and not t.parked and t.queue = $2::text\n       and not exists`,
    replace: `where t.status in ('queued', 'scheduled') and not t.parked and t.queue = $2::text\n       and not exists`,
    also: [
      {
        file: DISPATCH,
        find: `where t.status = 'queued' and not t.parked and t.queue = $2::text and t.tenant = s.tenant`,
        replace: `where t.status in ('queued', 'scheduled') and not t.parked and t.queue = $2::text and t.tenant = s.tenant`,
      },
    ],
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'claim-paused',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'a paused queue yields nothing',
    find: `and not exists (select 1 from queues q where q.name = $2::text and q.paused)`,
    replace: `and not exists (select 1 from queues q where q.name = $2::text and false)`,
    tests: ['test/tenants/fairness.test.ts'],
  },
  {
    id: 'reap-expired',
    file: MAINTENANCE,
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
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'a failed at_most_once attempt is not retried',
    find: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'`,
    replace: `when r.outcome = 'failed' and t.attempts < t.max_attempts then 'scheduled'`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'finish-attempts-left',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'retry only while attempts remain',
    find: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts < t.max_attempts then 'scheduled'`,
    replace: `when r.outcome = 'failed' and t.delivery = 'at_least_once' and t.attempts <= t.max_attempts then 'scheduled'`,
    tests: ['test/tasks/retries.test.ts'],
  },
  {
    id: 'finish-read-once-but-failures',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'a success reads its task once (read_once_but_failures: the second read waits behind the outcome)',
    find: `where t.id = r.id and r.outcome = 'failed'
       offset 0) t on true`,
    replace: `where t.id = r.id and r.outcome = 'failed'
       ) t on true`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'finish-retry-keeps-attempt-start',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: "a retried attempt's history keeps its start (the retry clears the task's started_at)",
    find: `case when t.status = 'scheduled' then d.attempt_started_at else t.started_at end as attempt_started_at`,
    replace: `t.started_at as attempt_started_at`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'reap-at-most-once',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'an at_most_once task handed off is never handed off again',
    find: `when t.delivery = 'at_most_once' then 'dead'`,
    replace: `when false then 'dead'`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'reap-attempts-left',
    file: MAINTENANCE,
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

  {
    id: 'start-refuse-epoch',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'the lease epoch of the paused-queue refusal',
    find: `where t.id = any($2::bigint[]) and t.id = msg.id and t.lease_epoch = msg.epoch
       and t.status = 'running' and t.started_at is null
       and exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    replace: `where t.id = any($2::bigint[]) and t.id = msg.id
       and t.status = 'running' and t.started_at is null
       and exists (select 1 from queues q where q.name = t.queue and q.paused)`,
    tests: ['test/tasks/fencing.test.ts'],
  },
  {
    id: 'start-queue-paused',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'a paused queue refuses the start',
    find: `and t.rate_key is null
       and (\${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))`,
    replace: `and t.rate_key is null
       and (\${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and false))`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'claimed-not-started',
    file: TASKS_SHARED,
    statement: 'CLAIMED_NOT_STARTED (enqueue reschedule, schedule withdraw, cancel and bulk cancel)',
    guard: 'started_at is null: a running handler is never taken back',
    find: "export const CLAIMED_NOT_STARTED = `(t.status = 'running' and t.started_at is null)`;",
    replace: "export const CLAIMED_NOT_STARTED = `(t.status = 'running')`;",
    tests: [
      'test/schedules/api.test.ts',
      'test/tasks/idempotency.test.ts',
      'test/tasks/lookahead.test.ts',
      'test/tasks/cancel.test.ts',
      'test/tasks/replay.test.ts',
    ],
  },
  {
    id: 'not-started-waiting',
    file: TASKS_SHARED,
    statement: 'NOT_STARTED (enqueue ON CONFLICT, schedule withdraw, cancel and bulk cancel)',
    guard: `status in ('scheduled', 'queued'): a finished task's key stays spent`,
    find: "export const NOT_STARTED = `(${WAITING} or ${CLAIMED_NOT_STARTED})`;",
    replace: "export const NOT_STARTED = `(${WAITING.replace(\"'queued'\", \"'queued', 'succeeded'\")} or ${CLAIMED_NOT_STARTED})`;",
    tests: ['test/tasks/idempotency.test.ts', 'test/tasks/cancel.test.ts', 'test/tasks/replay.test.ts'],
  },
  {
    id: 'bulk-cancel-claimed-arm',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'the claimed arm: a task claimed early and not started is cancelled (it has no tenant index entry)',
    find: `\${pickedOf('claimed', CLAIMED_NOT_STARTED)}`,
    replace: `\${pickedOf('claimed', 'false')}`,
    tests: ['test/tasks/plans.test.ts', 'test/tasks/replay.test.ts'],
  },
  {
    id: 'bulk-cancel-waiting-arm-statuses',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'the waiting arm takes only waiting tasks: a finished one stays finished',
    find: `\${pickedOf('waiting', WAITING)}`,
    replace: `\${pickedOf('waiting', \`t.status in ('scheduled', 'queued', 'succeeded')\`)}`,
    tests: ['test/tasks/plans.test.ts', 'test/tasks/replay.test.ts'],
  },
  {
    id: 'bulk-cancel-batch-size',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'both arms together cancel at most one batch, the lowest ids',
    find: `select * from waiting union all select * from claimed
     order by id
     limit $3::int`,
    replace: `select * from waiting union all select * from claimed`,
    tests: ['test/tasks/plans.test.ts', 'test/tasks/replay.test.ts'],
  },
  {
    id: 'bulk-cancel-skip-locked',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'skip locked',
    find: `for update of t skip locked`,
    replace: `for update of t`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'replay-terminal-only',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'only finished tasks are replayed',
    find: `and t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and ($10::bigint is null or t.id > $10::bigint)
       and not exists (select 1 from tasks r where r.replay_of = t.id)`,
    replace: `and ($10::bigint is null or t.id > $10::bigint)
       and not exists (select 1 from tasks r where r.replay_of = t.id)`,
    tests: ['test/tasks/replay.test.ts'],
  },

  // -------------------------------------------------------------------------
  // Cancel: not after the start; tenant-scoped.
  {
    id: 'cancel-tenant',
    file: TASK_READS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'the tenant filter',
    find: `where t.tenant = $2::text
       and t.id = coalesce(`,
    replace: `where $2::text is not null
       and t.id = coalesce(`,
    tests: ['test/tasks/cancel.test.ts', 'test/tenants/isolation.test.ts'],
  },
  {
    id: 'cancel-by-key-tenant',
    file: TASK_READS,
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
    file: TASK_READS,
    statement: 'tasks_get',
    guard: 'the tenant filter',
    find: `from tasks where tenant = $1::text and id = $2::bigint`,
    replace: `from tasks where $1::text is not null and id = $2::bigint`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'get-by-key-tenant',
    file: TASK_READS,
    statement: 'tasks_get_by_key',
    guard: 'the tenant filter',
    find: `from tasks where tenant = $1::text and idempotency_key = $2::text`,
    replace: `from tasks where $1::text is not null and idempotency_key = $2::text`,
    tests: ['test/tasks/cancel.test.ts'],
  },
  {
    id: 'list-tenant',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'the tenant filter',
    find: `const tenantIs = statuses.includes('running') ? 'tenant = $1::text' : 'tenant = any(array[$1::text])';`,
    replace: `const tenantIs = '$1::text is not null';`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'list-running-arm',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'the running arm: a running task has no tenant index entry (migration 0026)',
    find: `union all
     \${listArm(['running'])}`,
    replace: ``,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'list-running-arm-shown-queued',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'the running arm is read for a filter on queued (a task claimed early shows as queued)',
    find: `s === 'running' ? ['queued', 'running'] : [s]`,
    replace: `s === 'running' ? ['running'] : [s]`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'list-arm-skipped-by-status',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'an arm whose statuses the filter cannot show is not read (a filter on live tasks reads no history)',
    find: `and ($3::text[] is null or $3::text[] && array[\${list(shown)}])`,
    replace: `and ($3::text[] is null or true)`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'list-tenant-as-array',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'list_in_tenant_order: the waiting and finished arms compare the tenant as an array',
    find: `'tenant = $1::text' : 'tenant = any(array[$1::text])'`,
    replace: `'tenant = $1::text' : 'tenant = $1::text'`,
    tests: ['test/tasks/list-plans.test.ts'],
  },
  {
    id: 'list-status-by-column',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'list_status_by_column: an arm without running tasks compares the stored status',
    find: `const statusIs = statuses.includes('running') ? shownStatusSql() : 'status';`,
    replace: `const statusIs = shownStatusSql();`,
    tests: ['test/tasks/list-plans.test.ts'],
  },
  {
    id: 'list-cursor-in-index',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'cursor_in_index: the cursor is always a bound, so it starts the scan in a generic plan too',
    find: `and id < coalesce($7::bigint, 9223372036854775807)`,
    replace: `and ($7::bigint is null or id < $7::bigint)`,
    tests: ['test/tasks/list-plans.test.ts'],
  },
  {
    id: 'list-page-size',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'the merged arms stop at one page',
    find: `   ) t
   order by tenant desc, id desc
   limit $8::int\`,`,
    replace: `   ) t
   order by tenant desc, id desc
   limit $8::int * 3\`,`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'list-by-tenant-index',
    file: TASK_READS,
    statement: 'tasks_list_for_tenant',
    guard: 'each arm names its statuses, so the tenant indexes by status answer it (one scan over every status walks the primary key past other tenants)',
    find: `  \`select * from (
     \${listArm(TERMINAL_STATUSES)}
     union all
     \${listArm(['scheduled', 'queued'])}
     union all`,
    replace: `  \`select * from (
     \${listArm([...TERMINAL_STATUSES, 'scheduled', 'queued'])}
     union all`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'stats-tenant',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'the tenant filter of the waiting counts',
    find: `where status in ('scheduled', 'queued') and tenant = $2::text`,
    replace: `where status in ('scheduled', 'queued') and $2::text is not null`,
    tests: ['test/tenants/isolation.test.ts', 'test/tenants/fairness.test.ts', 'test/http/dashboard-api.test.ts'],
  },
  {
    id: 'stats-live-by-partial-indexes',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: "the live counts asked by each partial index's own predicate (waiting, then running), so no scan reads the tenant's history",
    find: `where status in ('scheduled', 'queued') and tenant = $2::text
           union all
           select queue, status, started_at, run_at from tasks
           where status = 'running' and tenant = $2::text) t cross join clock`,
    replace: `where status in ('scheduled', 'queued', 'running') and tenant = $2::text) t cross join clock`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'stats-running-tenant',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'the tenant filter of the running counts',
    find: `where status = 'running' and tenant = $2::text) t cross join clock`,
    replace: `where status = 'running' and $2::text is not null) t cross join clock`,
    tests: ['test/tenants/isolation.test.ts', 'test/tenants/fairness.test.ts', 'test/http/dashboard-api.test.ts'],
  },
  {
    id: 'stats-finished-tenant',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'the tenant filter of the finished counts',
    find: `and t.tenant = $2::text
     group by t.queue, t.status`,
    replace: `and $2::text is not null
     group by t.queue, t.status`,
    tests: ['test/http/dashboard-api.test.ts'],
  },
  {
    id: 'stats-finished-window',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'finished counts cover the window, never the history (tasks_finished_idx range)',
    find: `and t.finished_at > (select now from clock) - make_interval(secs => $3::int)`,
    replace: `and $3::int is not null`,
    tests: ['test/http/dashboard-api.test.ts'],
  },
  {
    id: 'stats-finished-until-now',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: 'finished counts stop at now (a clock set back)',
    find: `and t.finished_at <= (select now from clock)
       and t.tenant = $2::text`,
    replace: `and true
       and t.tenant = $2::text`,
    tests: ['test/http/dashboard-api.test.ts'],
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
    find: `where s.tenant = $2::text and s.name = $3::text and \${LIVE} and \${NOT_STARTED}
     for update of t`,
    replace: `where $2::text is not null and s.name = $3::text and \${LIVE} and \${NOT_STARTED}
     for update of t`,
    tests: ['test/tenants/isolation.test.ts'],
  },
  {
    id: 'schedule-cancel-pending-not-started',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'started_at is null (a running occurrence is left to finish)',
    find: `and s.name = $3::text and \${LIVE} and \${NOT_STARTED}
     for update of t`,
    replace: `and s.name = $3::text and \${LIVE}
     for update of t`,
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

  {
    id: 'schedule-withdraw-tenant',
    file: SCHEDULES,
    statement: 'schedules_withdraw_planned_if_not_started',
    guard: 'the tenant filter',
    find: `where s.tenant = $2::text and s.name = $3::text and t.schedule_id = s.id
     and t.scheduled_for > coalesce(`,
    replace: `where $2::text is not null and s.name = $3::text and t.schedule_id = s.id
     and t.scheduled_for > coalesce(`,
    tests: ['test/tenants/isolation.test.ts', 'test/tasks/lookahead.test.ts'],
  },
  {
    id: 'match-tenant',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_cancel_matching_if_not_started, tasks_replay_terminal',
    guard: 'the tenant filter of the bulk filter',
    find: `export const MATCH_PREDICATES = \`t.tenant = $2::text`,
    replace: `export const MATCH_PREDICATES = \`$2::text is not null`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'match-shown-status',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_cancel_matching_if_not_started, tasks_replay_terminal',
    guard: 'the status filter matches the status the list shows (claimed early and not started: queued)',
    find: `or \${shownStatusSql('t.')} = any($6::text[]))`,
    replace: `or t.status = any($6::text[]))`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'finish-never-started-at-most-once',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'a failure of an at-most-once task that never started is left running for the reaper, not dead',
    find: `when r.outcome = 'failed' and t.delivery = 'at_most_once' and t.started_at is null then null`,
    replace: `when r.outcome = 'failed' and t.delivery = 'at_most_once' and t.started_at is null then 'dead'`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'finish-left-running',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'a result left undecided (never started, at most once) is not written',
    find: `t.lease_epoch = d.epoch and t.status = 'running'
       and d.next_status is not null`,
    replace: `t.lease_epoch = d.epoch and t.status = 'running'
       and true`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'schedule-put-due-fire-kept',
    file: 'src/schedules/service.ts',
    statement: 'schedules_upsert (next_run_at)',
    guard: 'a replacement keeping the timing keeps a fire time already due and not yet materialized',
    find: `      write.nextRunAt = existing.nextRunAt;`,
    replace: `      write.nextRunAt = write.nextRunAt;`,
    tests: ['test/schedules/api.test.ts'],
  },
  {
    id: 'schedule-put-due-fire-same-timing',
    file: 'src/schedules/service.ts',
    statement: 'schedules_upsert (next_run_at)',
    guard: 'only a replacement keeping the timing keeps the due fire time (a new timing starts from now)',
    find: `existing.nextRunAt <= clock && sameTiming(existing, { ...spec, anchor })) {`,
    replace: `existing.nextRunAt <= clock && sameTiming(existing, existing)) {`,
    tests: ['test/schedules/api.test.ts'],
  },
  {
    id: 'trigger-get-tenant',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_get_with_clock',
    guard: 'the tenant filter',
    find: `from schedules where tenant = $2::text and name = $3::text`,
    replace: `from schedules where $2::text is not null and name = $3::text`,
    tests: ['test/tenants/isolation.test.ts', 'test/schedules/api.test.ts'],
  },
  {
    id: 'quota-pending-tenant',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'maxPendingTasks counts only this tenant',
    find: `from tenant_pending_counts c where c.tenant = $2::text)::bigint`,
    replace: `from tenant_pending_counts c where $2::text is not null)::bigint`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'replay-pending-quota',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'maxPendingTasks counts the replays (pending_quota read before the insert)',
    find: `from originals o, clock, pending_quota,
          lateral (select coalesce($12::timestamptz, clock.now + coalesce($13::bigint, 0) * interval '1 millisecond') as due_at) d
     where pending_quota.ok`,
    replace: `from originals o, clock,
          lateral (select coalesce($12::timestamptz, clock.now + coalesce($13::bigint, 0) * interval '1 millisecond') as due_at) d
     where $14::int is not null`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'trigger-pending-quota',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_trigger_occurrence',
    guard: 'maxPendingTasks counts the occurrence (pending_quota read before the insert)',
    find: `from s, slot, clock, pending_quota
     where pending_quota.ok`,
    replace: `from s, slot, clock
     where $6::int is not null`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'finish-attempt-fenced',
    file: FENCE,
    statement: 'tasks_finish_if_running (attempts_written)',
    guard: 'an attempt row only for a finish applied (none for a result that lost its fence)',
    find: `f.attempt_started_at, f.now, f.error_name, f.error_message, f.http_status
     from finished f`,
    replace: `f.attempt_started_at, f.now, f.error_name, f.error_message, f.http_status
     from (select d.*, t.attempts, clock.now from decided d join tasks t on t.id = d.id, clock) f`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'finish-success-no-row',
    file: FENCE,
    statement: 'tasks_finish_if_running (attempts_written)',
    guard: 'a success with no http status writes no attempt row (success_is_the_task_row)',
    find: `where f.outcome <> 'succeeded' or f.http_status is not null`,
    replace: `where f.outcome is not null`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'finish-success-http-row',
    file: FENCE,
    statement: 'tasks_finish_if_running (attempts_written)',
    guard: 'a success with an http status keeps its row (the history shows the status)',
    find: `where f.outcome <> 'succeeded' or f.http_status is not null`,
    replace: `where f.outcome <> 'succeeded'`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'attempts-list-success-succeeded-only',
    file: 'src/db/sql/attempts.ts',
    statement: 'task_attempts_list (success_from_task_row)',
    guard: 'only a succeeded task shows its final attempt from the task row',
    find: `where t.status = 'succeeded'
       and not exists`,
    replace: `where t.status is not null
       and not exists`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'attempts-list-success-once',
    file: 'src/db/sql/attempts.ts',
    statement: 'task_attempts_list (success_from_task_row)',
    guard: 'a success that has a row is not shown a second time from the task row',
    find: `and not exists (select 1 from task_attempts s where s.task_id = t.id and s.outcome = 'succeeded')`,
    replace: `and true`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'reap-attempt-not-requeued',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired (attempts_written)',
    guard: 'a claim given back (queued) is no attempt',
    find: `where r.next_status <> 'queued'`,
    replace: `where r.next_status is not null`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'start-skipped-not-early',
    file: FENCE,
    statement: 'tasks_start_if_claimed (skipped)',
    guard: 'a message of the current claim that did not start (early, or refused for a paused queue) is no skipped attempt',
    find: `and not (cur.lease_epoch = m.epoch and cur.status = 'running' and cur.started_at is null)`,
    replace: `and true`,
    tests: ['test/tasks/lookahead.test.ts', 'test/tasks/attempts.test.ts'],
  },
  {
    id: 'attempts-list-tenant',
    file: 'src/db/sql/attempts.ts',
    statement: 'task_attempts_list',
    guard: 'the tenant filter',
    find: `where t.tenant = $1::text and t.id = $2::bigint`,
    replace: `where $1::text is not null and t.id = $2::bigint`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'purge-attempts-of-deleted',
    file: MAINTENANCE,
    statement: 'tasks_purge_finished (attempts_purged)',
    guard: "retention deletes the deleted tasks' attempts, only theirs",
    find: `delete from task_attempts a where a.task_id = any(array(select deleted.id from deleted))`,
    replace: `delete from task_attempts a where exists (select 1 from deleted)`,
    tests: ['test/tasks/attempts.test.ts'],
  },
  {
    id: 'callback-on-filter',
    file: 'migrations/0024_callback_pending_counts.sql',
    statement: 'function tasks_enqueue_callback (triggers tasks_callback_on_finish/_on_insert; 0024 replaces 0017)',
    guard: 'a callback only for the statuses in `on`',
    find: `if ((new.callback->'on') ? new.status) is not true then`,
    replace: `if new.callback is null then`,
    tests: ['test/tasks/callbacks.test.ts'],
  },
  {
    id: 'callback-when-has-callback',
    file: 'migrations/0017_attempts_results.sql',
    statement: 'trigger tasks_callback_on_finish',
    guard: 'tasks without a callback get none (the WHEN clause, with the function guard)',
    find: `when (new.callback is not null and old.status is distinct from new.status`,
    replace: `when (old.status is distinct from new.status`,
    also: [
      {
        file: 'migrations/0024_callback_pending_counts.sql',
        find: `if ((new.callback->'on') ? new.status) is not true then`,
        replace: `if ((new.callback->'on') ? new.status) is false then`,
      },
    ],
    tests: ['test/tasks/callbacks.test.ts'],
  },
  {
    id: 'callback-url-ssrf',
    file: 'src/tasks/options.ts',
    statement: 'callbackProblem (enqueue, schedule writes)',
    guard: 'a callback URL passes the http task SSRF check',
    find: `return check.ok ? null : { path:`,
    replace: `return true ? null : { path:`,
    tests: ['test/tasks/callbacks.test.ts'],
  },
  {
    id: 'quota-pending-check',
    file: 'migrations/0011_quotas.sql',
    statement: 'function tasks_refuse_over_pending_quota (tasks_insert_batch)',
    guard: 'maxPendingTasks is enforced exactly',
    find: `if adding > 0 and pending + adding > max_pending then`,
    replace: `if adding > 0 and pending + adding > max_pending + 1 then`,
    tests: ['test/tenants/quotas.test.ts'],
  },

  // -------------------------------------------------------------------------
  // SKIP LOCKED in every batch lock: overlapping sweeps take other rows at once.
  {
    id: 'claim-skip-locked',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'skip locked',
    find: `     order by t.vtime, t.id
     limit $3::int
     for update of t skip locked
   ),
   shares`,
    replace: `     order by t.vtime, t.id
     limit $3::int
     for update of t
   ),
   shares`,
    tests: ['test/sweep/concurrency.test.ts'],
  },
  {
    id: 'claim-passed-skip-locked',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'park_passed_full_keys: skip locked',
    find: `         and t.concurrency_key is not null and \${KEY_IS_FULL}
       order by t.vtime, t.id
       limit $3::int
       for update of t skip locked) p`,
    replace: `         and t.concurrency_key is not null and \${KEY_IS_FULL}
       order by t.vtime, t.id
       limit $3::int
       for update of t) p`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'without waiting for it',
  },
  {
    id: 'promote-skip-locked',
    file: MAINTENANCE,
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
    file: MAINTENANCE,
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
    file: MAINTENANCE,
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
    file: MAINTENANCE,
    statement: 'tasks_promote_due',
    guard: `status = 'scheduled'`,
    find: `where t.status = 'scheduled' and t.run_at <= (select now from clock) + make_interval(secs => $2::int)`,
    replace: `where t.status in ('scheduled', 'running') and t.run_at <= (select now from clock) + make_interval(secs => $2::int)`,
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'promote-due',
    file: MAINTENANCE,
    statement: 'tasks_promote_due',
    guard: 'run_at within the look-ahead',
    find: `where t.status = 'scheduled' and t.run_at <= (select now from clock) + make_interval(secs => $2::int)`,
    replace: `where t.status = 'scheduled' and t.run_at <= (select now from clock) + make_interval(secs => $2::int) + interval '1 hour'`,
    tests: ['test/sweep/path.test.ts'],
  },
  {
    id: 'promote-bound-in-index',
    file: MAINTENANCE,
    statement: 'tasks_promote_due',
    guard: 'promote_bound_in_index: the look-ahead bound is the due index\'s condition',
    find: `select t.id, t.queue, t.tenant, t.run_at from tasks t
     where t.status = 'scheduled' and t.run_at <= (select now from clock) + make_interval(secs => $2::int)`,
    replace: `select t.id, t.queue, t.tenant, t.run_at from tasks t, clock
     where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-retention',
    file: MAINTENANCE,
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
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'the tenant filter of the spent-key check',
    find: `where s.tenant = $2::text and s.idempotency_key = i.idempotency_key`,
    replace: `where s.idempotency_key = i.idempotency_key`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'enqueue-spent-key-kept',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'a started or finished task keeps its payload',
    find: `payload    = case when \${KEY_HELD} then excluded.payload else t.payload end,`,
    replace: `payload    = excluded.payload,`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'enqueue-spent-status-kept',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'a started or finished task keeps its status (the key is not reused)',
    find: `status     = case when \${KEY_HELD} then excluded.status else t.status end,`,
    replace: `status     = excluded.status,`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'spent-keys-find-tenant',
    file: ENQUEUE,
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
  // Issues 10, 11, 14, 15, 17: look-ahead undo, paused-queue start, schedule
  // pause/replace, quotas, the key's task type, replay, bulk cancel, trigger,
  // signing secrets, the kick probe, metrics.
  {
    id: 'enqueue-reschedule-epoch',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'a reschedule of a task claimed early bumps its epoch (the message in flight is stale)',
    find: `lease_epoch      = case when \${CLAIM_UNDONE} then t.lease_epoch + 1 else t.lease_epoch end,`,
    replace: `lease_epoch      = t.lease_epoch,`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    // Every NOT_STARTED / CLAIMED_NOT_STARTED of the enqueue loses its
    // started_at condition: a started task is rescheduled like a claimed one.
    id: 'enqueue-reschedule-not-started',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'started_at is null (a key whose handler started is spent)',
    find: `payload    = case when \${KEY_HELD} then excluded.payload else t.payload end,`,
    replace: `payload    = case when t.status in ('scheduled', 'queued', 'running') then excluded.payload else t.payload end,`,
    also: [
      {
        file: ENQUEUE,
        find: `run_at     = case when \${KEY_HELD} then excluded.run_at else t.run_at end,`,
        replace: `run_at     = case when t.status in ('scheduled', 'queued', 'running') then excluded.run_at else t.run_at end,`,
      },
      {
        file: ENQUEUE,
        find: `vtime      = case when not \${KEY_HELD} then t.vtime`,
        replace: `vtime      = case when not t.status in ('scheduled', 'queued', 'running') then t.vtime`,
      },
      {
        file: ENQUEUE,
        find: `status     = case when \${KEY_HELD} then excluded.status else t.status end,`,
        replace: `status     = case when t.status in ('scheduled', 'queued', 'running') then excluded.status else t.status end,`,
      },
      {
        file: ENQUEUE,
        find: `lease_epoch      = case when \${CLAIM_UNDONE} then`,
        replace: `lease_epoch      = case when t.status = 'running' then`,
      },
      {
        file: ENQUEUE,
        find: `attempts         = case when \${CLAIM_UNDONE} then`,
        replace: `attempts         = case when t.status = 'running' then`,
      },
      {
        file: ENQUEUE,
        find: `lease_expires_at = case when \${CLAIM_UNDONE} then`,
        replace: `lease_expires_at = case when t.status = 'running' then`,
      },
      {
        file: ENQUEUE,
        find: `dispatched_at    = case when \${CLAIM_UNDONE} then`,
        replace: `dispatched_at    = case when t.status = 'running' then`,
      },
      {
        file: ENQUEUE,
        find: `updated_at = case when \${KEY_HELD} then excluded.updated_at`,
        replace: `updated_at = case when t.status in ('scheduled', 'queued', 'running') then excluded.updated_at`,
      },
    ],
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'enqueue-reschedule-refund',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'the attempt counted at the early claim is refunded',
    find: `attempts         = case when \${CLAIM_UNDONE} then t.attempts - 1 else t.attempts end,`,
    replace: `attempts         = t.attempts,`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'start-paused',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'refuse_if_queue_paused: a paused queue\'s task does not start',
    find: `and exists (select 1 from queues q where q.name = t.queue and q.paused)
       and not \${NO_QUEUE_PAUSED}
     returning t.id`,
    replace: `and false
     returning t.id`,
    also: [
      {
        file: FENCE,
        find: `and t.rate_key is null
       and (\${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))`,
        replace: `and t.rate_key is null
       and true`,
      },
    ],
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'start-when-due',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'start_only_when_due: a message delivered before run_at does not start its task (a reschedule, cancel or pause in that window still wins)',
    find: `and t.run_at <= clock.now
     returning \${STARTED_COLUMNS}
   ),\${rated ? \`
   -- The places`,
    replace: `and true
     returning \${STARTED_COLUMNS}
   ),\${rated ? \`
   -- The places`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'start-paused-refund',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'a refused start refunds the attempt counted at the claim',
    find: `status = 'queued',
       attempts = t.attempts - 1,
       dispatched_at = null,`,
    replace: `status = 'queued',
       attempts = t.attempts,
       dispatched_at = null,`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'pause-tenant',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'the tenant filter',
    find: `target as (select s.id from schedules s where s.tenant = $2::text and s.name = $3::text)`,
    replace: `target as (select s.id from schedules s where $2::text is not null and s.name = $3::text)`,
    tests: ['test/tenants/isolation.test.ts', 'test/tasks/lookahead.test.ts'],
  },
  {
    id: 'pause-withdraw',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'withdraw_if_not_started: planned occurrences are taken back',
    find: `where t.schedule_id = target.id and t.scheduled_for > clock.now and \${LIVE} and \${NOT_STARTED}`,
    replace: `where t.schedule_id = target.id and t.scheduled_for > clock.now and false`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'pause-cancel',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'cancel_if_not_started: due occurrences are cancelled',
    find: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and \${LIVE} and \${NOT_STARTED}`,
    replace: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and false`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'pause-cancel-not-started',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'cancel_if_not_started: started_at is null (a running handler finishes)',
    find: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and \${LIVE} and \${NOT_STARTED}`,
    replace: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and \${LIVE}`,
    tests: ['test/tasks/lookahead.test.ts'],
  },
  {
    id: 'replace-withdraw-tenant',
    file: SCHEDULES,
    statement: 'schedules_withdraw_planned_if_not_started',
    guard: 'the tenant filter',
    find: `where s.tenant = $2::text and s.name = $3::text and t.schedule_id = s.id
     and t.scheduled_for > coalesce($1::timestamptz, now())`,
    replace: `where $2::text is not null and s.name = $3::text and t.schedule_id = s.id
     and t.scheduled_for > coalesce($1::timestamptz, now())`,
    tests: ['test/tenants/isolation.test.ts', 'test/tasks/lookahead.test.ts'],
  },
  {
    id: 'quota-pending',
    file: 'migrations/0011_quotas.sql',
    statement: 'function tasks_refuse_over_pending_quota (pending_quota)',
    guard: 'over maxPendingTasks the batch is refused',
    find: `if adding > 0 and pending + adding > max_pending then`,
    replace: `if false and pending + adding > max_pending then`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-pending-bound',
    file: 'migrations/0011_quotas.sql',
    statement: 'function tasks_refuse_over_pending_quota (pending_quota)',
    guard: 'up to the limit is allowed (> not >=)',
    find: `if adding > 0 and pending + adding > max_pending then`,
    replace: `if adding > 0 and pending + adding >= max_pending then`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-pending-finish',
    file: FENCE,
    statement: 'tasks_finish_if_running (pending_counted)',
    guard: 'finished tasks free room (the finish counts its terminal tasks out of pending)',
    find: `(select tenant from finished where status in ('succeeded', 'dead'))`,
    replace: `(select tenant from finished where false)`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-pending-held-keys',
    file: ENQUEUE,
    statement: 'tasks_insert_batch (pending_quota)',
    guard: 'a key the tenant already holds adds nothing (a reschedule at the limit)',
    find: `or not exists (select 1 from tasks e where e.tenant = $2::text and e.idempotency_key = k.key))\``,
    replace: `or true)\``,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-plain-counts-its-tasks',
    file: ENQUEUE,
    statement: 'tasks_insert_batch_plain (pending_quota)',
    guard: 'a batch without keys adds all its tasks to the pending count it checks',
    find: `: \`cardinality($4::text[])\``,
    replace: `: \`0 * cardinality($4::text[])\``,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-max-schedules',
    file: 'src/tenants/quotas.ts',
    statement: 'checkScheduleQuotas',
    guard: 'maxSchedules',
    find: `if (!p.replacing && schedules + 1 > quotas.maxSchedules) {`,
    replace: `if (!p.replacing && schedules + 1 > quotas.maxSchedules + 1) {`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-max-schedules-replacing',
    file: 'src/tenants/quotas.ts',
    statement: 'checkScheduleQuotas',
    guard: 'a replacement never counts against maxSchedules',
    find: `if (!p.replacing && schedules + 1 > quotas.maxSchedules) {`,
    replace: `if (schedules + 1 > quotas.maxSchedules) {`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-min-interval',
    file: 'src/tenants/quotas.ts',
    statement: 'checkScheduleQuotas',
    guard: 'minScheduleIntervalSeconds',
    find: `if (gap !== null && gap < quotas.minScheduleIntervalSeconds) {`,
    replace: `if (gap !== null && gap < quotas.minScheduleIntervalSeconds - 1) {`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'quota-schedule-count-tenant',
    file: TENANTS,
    statement: 'tenant_quotas_get_with_schedule_count',
    guard: 'the tenant filter of the schedule count',
    find: `(select count(*)::int from schedules s where s.tenant = $1::text) as schedules`,
    replace: `(select count(*)::int from schedules s where $1::text is not null) as schedules`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'key-task-type',
    file: 'migrations/0011_quotas.sql',
    statement: 'function tasks_keep_task_type_of_key',
    guard: 'a key keeps its task type (TQ003, 409)',
    find: `if held_task is distinct from new_task or held_queue is distinct from new_queue then`,
    replace: `if held_queue is distinct from new_queue then`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'key-queue',
    file: 'migrations/0011_quotas.sql',
    statement: 'function tasks_keep_task_type_of_key',
    guard: 'a key keeps its queue (TQ003, 409)',
    find: `if held_task is distinct from new_task or held_queue is distinct from new_queue then`,
    replace: `if held_task is distinct from new_task then`,
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'reap-at-most-once-requeue',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'at-most-once never started is requeued, not dead',
    find: `when t.delivery = 'at_most_once' and t.started_at is null then 'queued'`,
    replace: `when false then 'queued'`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'reap-at-most-once-not-started',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'at-most-once is requeued only if it never started (no second run)',
    find: `when t.delivery = 'at_most_once' and t.started_at is null then 'queued'`,
    replace: `when t.delivery = 'at_most_once' then 'queued'`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'replay-terminal',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'only terminal tasks are replayed',
    find: `and t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and ($10::bigint is null or t.id > $10::bigint)`,
    replace: `and t.status is not null
       and ($10::bigint is null or t.id > $10::bigint)`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'replay-tenant',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'the tenant filter',
    find: `where \${MATCH_PREDICATES}
       and t.status in ('succeeded', 'dead', 'cancelled', 'missed')`,
    replace: `where \${MATCH_PREDICATES.replace('t.tenant = $2::text', '$2::text is not null')}
       and t.status in ('succeeded', 'dead', 'cancelled', 'missed')`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'replay-once',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'no replay yet (NOT EXISTS; the unique index settles races)',
    find: `and not exists (select 1 from tasks r where r.replay_of = t.id)`,
    replace: `and true`,
    also: [
      {
        file: 'migrations/0014_replay.sql',
        find: `create unique index`,
        replace: `create index`,
      },
      {
        file: 'src/db/sql/replay.ts',
        find: `on conflict (replay_of) where replay_of is not null do nothing`,
        replace: `on conflict do nothing`,
      },
    ],
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'bulk-cancel-tenant',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'the tenant filter',
    find: `where \${MATCH_PREDICATES}`,
    replace: `where \${MATCH_PREDICATES.replace('t.tenant = $2::text', '$2::text is not null')}`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'trigger-tenant',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_trigger_occurrence',
    guard: 'the tenant filter',
    find: `s as (select * from schedules where tenant = $2::text and id = $4::bigint),`,
    replace: `s as (select * from schedules where $2::text is not null and id = $4::bigint),`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'trigger-free-slot',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_trigger_occurrence',
    guard: 'a slot an occurrence holds is skipped',
    find: `where not exists (select 1 from tasks o where o.schedule_id = s.id and o.scheduled_for = c.at)`,
    replace: `where true`,
    tests: ['test/tasks/replay.test.ts'],
  },
  {
    id: 'signing-secrets-tenant',
    file: 'src/db/sql/signing-secrets.ts',
    statement: 'signing_secrets_find',
    guard: 'the tenant filter',
    find: `where s.tenant = any($2::text[])`,
    replace: `where $2::text[] is not null`,
    tests: ['test/tenants/signing-secrets.test.ts'],
  },
  {
    id: 'kick-probe-skip-locked',
    file: 'src/db/sql/kick.ts',
    statement: 'queues_probe_claim_free',
    guard: 'skip locked (a kick leaves at once while a claim holds the queue row)',
    find: `for update skip locked) free`,
    replace: `for update) free`,
    tests: ['test/sweep/kick.test.ts'],
  },
  {
    id: 'dispatcher-slot-cap',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'dispatcher_slots_acquire_free',
    guard: 'the cap: only slots below MAX_DISPATCHERS are taken',
    find: `where s.slot < $2::int`,
    replace: `where $2::int is not null`,
    tests: ['test/sweep/pump.test.ts'],
  },
  {
    id: 'dispatcher-slot-live-lease',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'dispatcher_slots_acquire_free',
    guard: 'a held slot is taken over only once its lease ran out',
    find: `and s.expires_at <= clock.now`,
    replace: `and clock.now is not null`,
    tests: ['test/sweep/pump.test.ts'],
  },
  {
    id: 'dispatcher-release-token',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'dispatcher_slots_release_own',
    guard: "the holder's token: a dispatcher whose lease ran out cannot free the slot its successor holds",
    find: `where slot = $1::int and token = $2::uuid`,
    replace: `where slot = $1::int and $2::uuid is not null`,
    tests: ['test/sweep/pump.test.ts'],
  },
  // The idle probe: an arm that says "nothing" while its step has work would stop that step for good.
  {
    id: 'probe-reap',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'expired leases make the sweep run',
    find: `or (select true from tasks t where t.status = 'running' and t.lease_expires_at < clock.now
         order by t.id limit 1) is not null`,
    replace: `or false`,
    tests: ['test/tasks/faults.test.ts'],
  },
  {
    id: 'probe-materialize',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'due schedules make the sweep run',
    find: `or exists (select 1 from schedules s
                where s.enabled and s.next_run_at is not null
                  and s.next_run_at <= clock.now + make_interval(secs => $2::int))`,
    replace: `or $2::int is null`,
    tests: ['test/schedules/materialize.test.ts'],
  },
  {
    id: 'probe-promote',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'scheduled tasks within the look-ahead make the sweep run',
    find: `or (select true from tasks t
         where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)
         order by t.run_at limit 1) is not null`,
    replace: `or false`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'probe-dispatch',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'queued tasks make the sweep run',
    find: `(select true from tasks t where t.status = 'queued' and not t.parked
      order by t.queue, t.vtime, t.id limit 1) is not null
     or (select true from tasks t where t.status = 'queued' and t.parked
         order by t.tenant, t.concurrency_key, t.priority desc, t.vtime, t.id limit 1) is not null`,
    replace: `false`,
    tests: ['test/sweep/path.test.ts'],
  },
  // probe_reap_last: the reap arm reads every running task, so it is asked last.
  {
    id: 'probe-reap-first',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'probe_reap_last',
    find: `select
     -- dispatch: runnable or parked tasks`,
    replace: `select
     (select true from tasks t where t.status = 'running' and t.lease_expires_at < clock.now
      order by t.id limit 1) is not null or`,
    tests: ['test/tasks/plans.test.ts'],
  },
  // probe_reads_the_index: as `exists`, an arm over stale statistics read tasks whole.
  {
    id: 'probe-dispatch-by-index',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'probe_reads_the_index (the runnable index)',
    find: `(select true from tasks t where t.status = 'queued' and not t.parked
      order by t.queue, t.vtime, t.id limit 1) is not null`,
    replace: `exists (select 1 from tasks t where t.status = 'queued' and not t.parked)`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'probe-parked-in-index-order',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'probe_parked_in_index_order: in the replaced index\'s order, a probe sorted the whole parked backlog',
    find: `order by t.tenant, t.concurrency_key, t.priority desc, t.vtime, t.id limit 1`,
    replace: `order by t.tenant, t.concurrency_key, t.vtime, t.id limit 1`,
    tests: ['test/tasks/plans.test.ts'],
    testName: "parked backlog from the parked index's first row",
  },
  {
    id: 'flow-control-tables-analyzed',
    file: 'migrations/0036_flow_control_tables_analyzed.sql',
    statement: 'migration 0036',
    guard: "flow_control_tables_analyzed: never analyzed, an unused flow-control table is planned as ten pages, and the claim's flow filter as a costly probe per task",
    find: `analyze concurrency_slots;
analyze concurrency_frees;`,
    replace: `select 1;`,
    tests: ['test/db/migrate.test.ts'],
    testName: '0036',
  },
  {
    id: 'probe-promote-by-index',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'probe_reads_the_index (the due index)',
    find: `or (select true from tasks t
         where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int)
         order by t.run_at limit 1) is not null`,
    replace: `or exists (select 1 from tasks t
                where t.status = 'scheduled' and t.run_at <= clock.now + make_interval(secs => $2::int))`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'window-bound-in-index',
    file: 'src/db/sql/stats.ts',
    statement: 'tasks_finished_per_minute',
    guard: 'window_bound_in_index: the window\'s ends are the retention index\'s condition',
    find: `   from tasks t
   where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
     and t.finished_at > (select now from clock) - make_interval(mins => $3::int)
     and t.finished_at <= (select now from clock)`,
    replace: `   from tasks t cross join clock
   where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
     and t.finished_at > clock.now - make_interval(mins => $3::int)
     and t.finished_at <= clock.now`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'busy-from-live-occurrences',
    file: 'migrations/0028_live_occurrences.sql',
    statement: 'tasks_live_occurrences_idx',
    guard: 'busy_from_live_occurrences: a schedule\'s live occurrences have an index of their own',
    find: `create index tasks_live_occurrences_idx on tasks (schedule_id)
  where status in ('scheduled', 'queued', 'running') and schedule_id is not null;`,
    replace: `select 1;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'idle-slots-from-candidates',
    file: 'src/db/sql/concurrency.ts',
    statement: 'concurrency_slots_lock_idle',
    guard: 'idle_slots_from_candidates: only the keys of the tasks just deleted are asked about',
    find: `     where s.tenant = c.tenant and s.key = c.key
       and s.running <=`,
    replace: `     where (c.tenant, c.key) is not null
       and s.running <=`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'retention-by-age',
    file: 'migrations/0027_retention_by_age.sql',
    statement: 'tasks_finished_tenant_idx',
    guard: 'retention_by_age: a read that names no tenant cannot take the tenant index',
    find: `where status in ('succeeded', 'dead', 'cancelled', 'missed') and tenant is not null;`,
    replace: `where status in ('succeeded', 'dead', 'cancelled', 'missed');`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'spent-keys-by-age',
    file: 'migrations/0029_lines_and_spent_keys_by_age.sql',
    statement: 'spent_idempotency_keys_spent_at_idx',
    guard: 'purge_reads_by_age: spent keys have an index by age',
    find: `create index if not exists spent_idempotency_keys_spent_at_idx on spent_idempotency_keys (spent_at);`,
    replace: `select 1;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'claim-lines-by-age',
    file: 'migrations/0029_lines_and_spent_keys_by_age.sql',
    statement: 'rate_limits_next_claim_at_idx',
    guard: 'purge_reads_by_age: claim lines have an index by age',
    find: `create index if not exists rate_limits_next_claim_at_idx on rate_limits (next_claim_at);`,
    replace: `select 1;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-lines-by-age',
    file: 'migrations/0029_lines_and_spent_keys_by_age.sql',
    statement: 'rate_start_lines_next_start_at_idx',
    guard: 'purge_reads_by_age: start lines have an index by age',
    find: `create index if not exists rate_start_lines_next_start_at_idx on rate_start_lines (next_start_at);`,
    replace: `select 1;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'probe-marks-by-age',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'purge_reads_by_age: the marks arm asks for its first row in the index order, not `exists`',
    find: `or (select true from dispatch_marks m where m.dispatched_at < clock.now - make_interval(secs => $4::int)
         order by m.dispatched_at limit 1) is not null`,
    replace: `or exists (select 1 from dispatch_marks m where m.dispatched_at < clock.now - make_interval(secs => $4::int))`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'probe-spent-keys-by-age',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'purge_reads_by_age: the spent-key arm asks for its first row in the index order, not `exists`',
    find: `(select true from spent_idempotency_keys k
                          where k.spent_at < clock.now - make_interval(secs => $5::int)
                          order by k.spent_at limit 1) is not null)`,
    replace: `exists (select 1 from spent_idempotency_keys k
                          where k.spent_at < clock.now - make_interval(secs => $5::int)))`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'probe-lines-by-age',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'purge_reads_by_age: the rate-line arms ask for their first row in the index order, not `exists`',
    find: `or (select true from rate_limits r where r.next_claim_at < clock.now - make_interval(secs => $3::int)
         order by r.next_claim_at limit 1) is not null
     or (select true from rate_start_lines r where r.next_start_at < clock.now - make_interval(secs => $3::int)
         order by r.next_start_at limit 1) is not null`,
    replace: `or exists (select 1 from rate_limits r where r.next_claim_at < clock.now - make_interval(secs => $3::int))
     or exists (select 1 from rate_start_lines r where r.next_start_at < clock.now - make_interval(secs => $3::int))`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-lines-oldest-first',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'purge_reads_by_age: the lines are read oldest first, by their indexes',
    find: `     where r.next_claim_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by r.next_claim_at`,
    replace: `     where r.next_claim_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)`,
    also: [
      {
        file: CONCURRENCY,
        find: `     where r.next_start_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)
     order by r.next_start_at`,
        replace: `     where r.next_start_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)`,
      },
    ],
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-spent-keys-oldest-first',
    file: MAINTENANCE,
    statement: 'spent_idempotency_keys_purge',
    guard: 'purge_reads_by_age: spent keys are read oldest first, by their index',
    find: `     order by spent_at
     limit $3::int`,
    replace: `     limit $3::int`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'counts-window-bound-in-index',
    file: TENANTS,
    statement: 'queues_stats_for_tenant',
    guard: "counts_window_bound_in_index: the finished window's ends are the clock's value, the retention index's condition",
    find: `     from tasks t
     where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and t.finished_at > (select now from clock) - make_interval(secs => $3::int)
       and t.finished_at <= (select now from clock)`,
    replace: `     from tasks t cross join clock
     where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
       and t.finished_at > clock.now - make_interval(secs => $3::int)
       and t.finished_at <= clock.now`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'probe-purge',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'history past its retention makes the sweep run',
    find: `or (select true from tasks t
         where t.status in ('succeeded', 'dead', 'cancelled', 'missed')
           and t.finished_at < clock.now - make_interval(secs => $3::int)
         order by t.finished_at limit 1) is not null
     or (select true from dispatch_marks m where m.dispatched_at < clock.now - make_interval(secs => $4::int)
         order by m.dispatched_at limit 1) is not null
     or ($5::int > 0 and (select true from spent_idempotency_keys k
                          where k.spent_at < clock.now - make_interval(secs => $5::int)
                          order by k.spent_at limit 1) is not null)`,
    replace: `or ($3::int + $4::int + $5::int) is null`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'probe-purge-rate-lines',
    file: 'src/db/sql/dispatchers.ts',
    statement: 'sweep_probe_due_work',
    guard: 'a rate line past by the retention makes the sweep run (issue 16)',
    find: `or (select true from rate_limits r where r.next_claim_at < clock.now - make_interval(secs => $3::int)
         order by r.next_claim_at limit 1) is not null
     or (select true from rate_start_lines r where r.next_start_at < clock.now - make_interval(secs => $3::int)
         order by r.next_start_at limit 1) is not null`,
    replace: ``,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'stats-per-minute-tenant',
    file: 'src/db/sql/stats.ts',
    statement: 'tasks_finished_per_minute',
    guard: 'the tenant filter',
    find: `and t.tenant = $2::text
   group by grouping sets`,
    replace: `and $2::text is not null
   group by grouping sets`,
    tests: ['test/http/dashboard-api.test.ts'],
  },
  {
    id: 'metrics-live-tenant',
    file: 'src/db/sql/stats.ts',
    statement: 'metrics_snapshot',
    guard: 'the tenant filter of the live arms',
    find: `where status = 'scheduled' and ($2::text is null or tenant = $2::text)`,
    replace: `where status = 'scheduled' and ($2::text is null or true)`,
    also: [
      {
        file: 'src/db/sql/stats.ts',
        find: `where status = 'queued' and ($2::text is null or tenant = $2::text)`,
        replace: `where status = 'queued' and ($2::text is null or true)`,
      },
      {
        file: 'src/db/sql/stats.ts',
        find: `where status = 'running' and ($2::text is null or tenant = $2::text)`,
        replace: `where status = 'running' and ($2::text is null or true)`,
      },
    ],
    tests: ['test/http/metrics.test.ts'],
  },
  {
    id: 'metrics-recent-tenant',
    file: 'src/db/sql/stats.ts',
    statement: 'metrics_snapshot',
    guard: 'the tenant filter of the recent window',
    find: `and ($2::text is null or t.tenant = $2::text)`,
    replace: `and ($2::text is null or true)`,
    tests: ['test/http/metrics.test.ts'],
  },
  {
    id: 'metrics-queues-tenant',
    file: 'src/db/sql/stats.ts',
    statement: 'metrics_snapshot',
    guard: 'a tenant sees only the queues it has tasks in',
    find: `where $2::text is null or exists (select 1 from live where live.queue = q.name)`,
    replace: `where $2::text is null or true or exists (select 1 from live where live.queue = q.name)`,
    tests: ['test/http/metrics.test.ts'],
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
      {
        file: 'src/db/sql/trigger.ts',
        find: `on conflict (schedule_id, scheduled_for) where schedule_id is not null do nothing`,
        replace: `on conflict do nothing`,
      },
    ],
    tests: ['test/schedules/materialize.test.ts', 'test/tasks/lookahead.test.ts'],
  },
  // -------------------------------------------------------------------------
  // Rate limits (issue 16, migration 0018): the claim's reservations and the
  // fenced start's line.
  {
    id: 'claim-rate-run-at',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'a rate-limited task is sent for its reserved start (run_at moved to it)',
    find: `run_at = coalesce(d.start_at, t.run_at),`,
    replace: `run_at = t.run_at,`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-line',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "a claim's reservations start after the key's earlier reservations (the claim line)",
    find: `greatest(g.claim_from, b.base) + (b.pos - 1) * b.step as start_at`,
    replace: `b.base + (b.pos - 1) * b.step as start_at`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-defer',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'a reservation beyond the look-ahead is not claimed: the task goes back to scheduled',
    find: `coalesce(r.start_at > clock.now + make_interval(secs => $7::int), false) as deferred`,
    replace: `coalesce(r.start_at is null and $7::int is null, false) as deferred`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-reserve-within-lookahead',
    file: 'migrations/0018_rate_limits.sql',
    statement: 'tasks_claim_runnable',
    guard: 'reserve_within_lookahead: deferred tasks do not move the claim line',
    find: `where greatest(line, u.base) + (u.pos - 1) * step <= horizon`,
    replace: `where horizon is not null`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-tenant',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "reservations are counted per tenant's key (another tenant's tasks with the same key do not space them)",
    find: `row_number() over (partition by p.tenant, p.rate_key order by p.run_at, p.vtime, p.id) as pos`,
    replace: `row_number() over (partition by p.rate_key order by p.run_at, p.vtime, p.id) as pos`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'flow-purge-slot-no-task',
    file: CONCURRENCY,
    statement: 'concurrency_slots_lock_idle, flow_control_purge_idle',
    guard: "a key's slot row is forgotten only once none of its tasks waits (checked in both steps)",
    find: `and not exists (select 1 from tasks t where t.tenant = s.tenant and t.concurrency_key = s.key and \${WAITING_OF_KEY})`,
    replace: `and true`,
    also: [
      {
        file: CONCURRENCY,
        find: `and not exists (select 1 from tasks t where t.tenant = k.tenant and t.concurrency_key = k.key and \${WAITING_OF_KEY})`,
        replace: `and true`,
      },
    ],
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-slot-none-running',
    file: CONCURRENCY,
    statement: 'concurrency_slots_lock_idle, flow_control_purge_idle',
    guard: "idle_key: a key's slot row is forgotten only once nothing of it runs, its running count all freed (checked in both steps)",
    find: `and s.running <= \${UNCOUNTED_FREES}`,
    replace: ``,
    also: [
      {
        file: CONCURRENCY,
        find: `where s.running = (select coalesce(sum(x.n), 0) from frees x where x.tenant = k.tenant and x.key = k.key)
       and not exists`,
        replace: `where not exists`,
      },
    ],
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-waiting-index',
    file: 'migrations/0033_concurrency_key_waiting.sql',
    statement: 'tasks_concurrency_key_waiting_idx',
    guard: "the index answers the purge's waiting check (without it, the check reads the key's tasks another way)",
    find: `create index if not exists tasks_concurrency_key_waiting_idx on tasks (tenant, concurrency_key)
  where concurrency_key is not null and status in ('scheduled', 'queued');`,
    replace: `select 1;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'flow-purge-slot-skip-locked',
    file: CONCURRENCY,
    statement: 'concurrency_slots_lock_idle',
    guard: 'skip locked: a slot row a claim or an enqueue holds is left alone',
    find: `for update of s skip locked`,
    replace: `for update of s`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-frees-skip-locked',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'skip locked: frees a claim holds are left alone',
    find: `for update of f skip locked`,
    replace: `for update of f`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-claim-line-retention',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'a claim line is forgotten only once past by the retention',
    find: `where r.next_claim_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)`,
    replace: `where r.next_claim_at < coalesce($1::timestamptz, now())`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-start-line-retention',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'a start line is forgotten only once past by the retention',
    find: `where r.next_start_at < coalesce($1::timestamptz, now()) - make_interval(secs => $2::int)`,
    replace: `where r.next_start_at < coalesce($1::timestamptz, now())`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-rate-skip-locked',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'skip locked: a claim line a claim holds is left alone',
    find: `order by r.next_claim_at
     limit $3::int
     for update of r skip locked`,
    replace: `order by r.next_claim_at
     limit $3::int
     for update of r`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'flow-purge-start-line-skip-locked',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'skip locked: a start line a fenced start holds is left alone',
    find: `order by r.next_start_at
     limit $3::int
     for update of r skip locked`,
    replace: `order by r.next_start_at
     limit $3::int
     for update of r`,
    tests: ['test/sweep/maintenance.test.ts'],
  },
  {
    id: 'start-rate-line-advance',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'start_line_advance: every start the line lets through moves it a step on',
    find: "next_start_at = (select ${startLineAfter('l.next_start_at')}",
    replace: 'next_start_at = (select greatest(l.next_start_at, clock.now)',
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-line-moves-by-its-starts',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: "start_line_advance: the line moves by this statement's starts of the key, no further",
    find: 'least(k.n, greatest(0, floor(',
    replace: 'least(k.n + 1, greatest(0, floor(',
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-line-never-back',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'start_line_advance: a line already past the wait budget lets nothing through and stays where it stands',
    find: 'least(k.n, greatest(0, floor(',
    replace: 'least(k.n, greatest(-1000, floor(',
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-line-last-fit',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'start_line_advance: a start placed exactly at the end of the wait budget goes (the count that fits is floor + 1)',
    find: '/ extract(epoch from k.step)) + 1))::int * k.step',
    replace: '/ extract(epoch from k.step))))::int * k.step',
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-on-line-rechecks',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'started_on_line rechecks each row (rate_tasks read it unlocked): a task another start took meanwhile is not started again',
    find: `where t.id = any($2::bigint[]) and t.id = p.id and t.lease_epoch = p.epoch
       and t.status = 'running' and t.started_at is null`,
    replace: `where t.id = any($2::bigint[]) and t.id = p.id and t.lease_epoch = p.epoch
       and t.status = 'running'`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-refuse',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'refuse_over_rate: a start pushed past the wait budget goes back queued',
    find: `and t.status = 'running' and t.started_at is null and rd.over`,
    replace: `and t.status = 'running' and t.started_at is null and false`,
    also: [
      {
        file: FENCE,
        find: `     from rate_decided where not over
   ),`,
        replace: `     from rate_decided
   ),`,
      },
    ],
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-refund',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'a start refused over the rate refunds the attempt counted at the claim',
    find: `attempts = t.attempts - 1,
       run_at = rd.start_at,`,
    replace: `attempts = t.attempts,
       run_at = rd.start_at,`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-step-of-key',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: "start_rate_of_key: the start line's spacing is the key's (its last claim's), not that of the tasks one start statement holds",
    find: `rate_limit_step(coalesce(k.max_starts, n.rate_limit), coalesce(k.period_seconds, n.rate_period_seconds)) as step`,
    replace: `rate_limit_step(n.rate_limit, n.rate_period_seconds) as step`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-keys-per-tenant',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: "the start's rate_keys holds a row per tenant's key",
    find: `count(*) over (partition by r.tenant, r.rate_key)::int as n`,
    replace: `count(*) over (partition by r.rate_key)::int as n`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-rate-tenant',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: "the start line is per tenant's key",
    find: `row_number() over (partition by r.tenant, r.rate_key order by r.id) as pos`,
    replace: `row_number() over (partition by r.rate_key order by r.id) as pos`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },

  // Concurrency slots freed through the ledger (migration 0018).
  {
    id: 'start-on-line-keeps-run-at',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'start_on_line_keeps_run_at: a start on the line leaves run_at (in two indexes) as the claim set it',
    find: `   started_on_line as (
     update tasks t set
       started_at`,
    replace: `   started_on_line as (
     update tasks t set
       run_at = p.start_at,
       started_at`,
    tests: ['test/tasks/rate-limit.test.ts'],
    testName: 'late deliveries never bunch',
  },
  {
    id: 'claim-slot-frees',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'the claim subtracts the frees it takes from the running count',
    find: `freed as (select tenant, key, sum(n)::int as n from freed_rows group by tenant, key),`,
    replace: `freed as (select tenant, key, 0 as n from freed_rows group by tenant, key),`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  // Claims at once leave a near-full key to the claim whose turn it is
  // (claim_passes_busy_keys).
  {
    id: 'claim-passes-busy-keys',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "claim_passes_busy_keys: the fair slots' scan passes over a key another claim's turn holds",
    find: `       and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
     order by t.vtime, t.id`,
    replace: `       and (t.concurrency_key is null or not \${KEY_IS_FULL})\` : ''}
     order by t.vtime, t.id`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'claims at once pass over a near-full key',
  },
  {
    id: 'claim-pick-passes-busy-keys',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "claim_passes_busy_keys: each tenant's pick by priority passes over a key another claim's turn holds",
    find: `           and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
         order by t.priority desc, t.run_at, t.id`,
    replace: `           and (t.concurrency_key is null or not \${KEY_IS_FULL})\` : ''}
         order by t.priority desc, t.run_at, t.id`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'claims at once pass over a near-full key',
  },
  {
    id: 'claim-plain-leaves-flow-control',
    file: DISPATCH,
    statement: 'tasks_claim_runnable_plain',
    guard: 'plain_claim_leaves_flow_control: the plain claim writes nothing when its batch holds flow control',
    find: `     from picked p where not (select seen from flow_seen)`,
    replace: `     from picked p where true`,
    also: [
      {
        file: DISPATCH,
        find: `where t.id = d.id\${flow ? '' : ' and not (select seen from flow_seen)'}`,
        replace: `where t.id = d.id`,
      },
    ],
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'a claim tried plain on a batch with a concurrency key',
  },
  {
    id: 'claim-plain-sees-rate-limits',
    file: DISPATCH,
    statement: 'tasks_claim_runnable_plain',
    guard: 'plain_claim_leaves_flow_control: a rate limit is flow control too',
    find: `select exists (select 1 from slots where concurrency_key is not null or rate_key is not null)
            or exists (select 1 from best_locked where concurrency_key is not null or rate_key is not null) as seen`,
    replace: `select exists (select 1 from slots where concurrency_key is not null)
            or exists (select 1 from best_locked where concurrency_key is not null) as seen`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'whose only flow control is a rate limit',
  },
  {
    id: 'claim-priority-scan-in-order',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "claim_priority_scan_in_order: the priority scan is planned for at most a batch, so it reads the tenant's runnable tasks in index order",
    find: `       select l.* from (
         select t.id, t.tenant, t.priority, t.run_at, t.vtime, t.concurrency_key, t.concurrency_limit,
                t.rate_key, t.rate_limit, t.rate_period_seconds from tasks t
         where t.status = 'queued' and not t.parked and t.queue = $2::text and t.tenant = s.tenant\${flow ? \`
           and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
         order by t.priority desc, t.run_at, t.id
         limit $3::int
         for update of t skip locked) l
       limit s.k) b`,
    replace: `       select t.id, t.tenant, t.priority, t.run_at, t.vtime, t.concurrency_key, t.concurrency_limit,
              t.rate_key, t.rate_limit, t.rate_period_seconds from tasks t
       where t.status = 'queued' and not t.parked and t.queue = $2::text and t.tenant = s.tenant\${flow ? \`
         and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
       order by t.priority desc, t.run_at, t.id
       limit s.k
       for update of t skip locked) b`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'claim-turns-near-full',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'claim_passes_busy_keys: only a key without room for two batches takes turns; claims at once share a roomy one',
    find: `and s.max_running - \${RUNNING_NOW} < 2 * $3::int)`,
    replace: `and true)`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'claims at once both take a key with room',
  },
  {
    id: 'claim-turns-bounded',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: 'claim_passes_busy_keys: a claim tries at most KEY_TURNS turns (lock table entries)',
    find: `           limit \${KEY_TURNS}) k`,
    replace: `           ) k`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'at most 32 keys',
  },
  // A task made runnable under a full key goes in parked (parked_if_key_full).
  {
    id: 'enqueue-parks-if-key-full',
    file: ENQUEUE,
    statement: 'tasks_insert_batch, tasks_insert_batch_plain',
    guard: 'parked_if_key_full: a task enqueued runnable under a full key is inserted parked',
    find: `            \${parkedIfKeyFull('r.runnable', '$2::text', 'r.concurrency_key')}`,
    replace: `            false`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'enqueued into a full key',
  },
  {
    id: 'promote-parks-if-key-full',
    file: MAINTENANCE,
    statement: 'tasks_promote_due',
    guard: 'parked_if_key_full: a task that comes due under a full key is made runnable parked',
    find: `parked = \${parkedIfKeyFull('true', 't.tenant', 't.concurrency_key')}`,
    replace: `parked = false`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'comes due under a full key',
  },
  {
    id: 'parked-if-key-full-runnable',
    file: CONCURRENCY,
    statement: 'tasks_insert_batch',
    guard: 'parked_if_key_full: only a runnable task is parked (a scheduled one is not)',
    find: `\`(\${runnable} and \${key} is not null`,
    replace: `\`(\${key} is not null`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'comes due under a full key',
  },
  // A freed slot wakes its key's parked tasks by priority, then vtime (0034).
  {
    id: 'wake-by-priority',
    file: 'migrations/0034_parked_by_priority.sql',
    statement: 'function concurrency_slots_free (every statement that frees a slot)',
    guard: "a freed slot wakes its key's parked task of highest priority first",
    find: `                   order by p.priority desc, p.vtime, p.id
                   limit n`,
    replace: `                   order by p.vtime, p.id
                   limit n`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'wakes its key',
  },
  {
    id: 'sweep-wake-by-priority',
    file: DISPATCH,
    statement: 'tasks_wake_parked',
    guard: "the sweep's wake takes a key's parked task of highest priority first",
    find: `       order by p.priority desc, p.vtime, p.id
       limit r.free`,
    replace: `       order by p.vtime, p.id
       limit r.free`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'raised limit wakes the parked task of highest priority',
  },
  // A claim takes no more of a key than its free slots, and parks only what
  // it passed over (claim_skips_full_keys, park_passed_full_keys).
  {
    id: 'claim-skips-full-keys',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "claim_skips_full_keys: the fair slots' scan passes over a full key's tasks",
    find: `       and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
     order by t.vtime, t.id`,
    replace: `       and (t.concurrency_key is null or \${KEY_NOT_BUSY})\` : ''}
     order by t.vtime, t.id`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'leaves the tasks over the limit runnable',
  },
  {
    id: 'claim-full-key-by-slot-row',
    file: CONCURRENCY,
    statement: 'tasks_claim_runnable',
    guard: "claim_skips_full_keys: a task's key is asked of its slot row by primary key, not as a set of every full key",
    find: `export const keyIsFull = (tenant: string, key: string) => \`exists (select 1 from concurrency_slots s
                  where s.tenant = \${tenant} and s.key = \${key} and s.running >= s.max_running`,
    replace: `export const keyIsFull = (tenant: string, key: string) => \`(\${tenant}, \${key}) in (select s.tenant, s.key from concurrency_slots s
                  where s.running >= s.max_running`,
    tests: ['test/tasks/plans.test.ts'],
    testName: 'many concurrency keys',
  },
  {
    id: 'claim-pick-skips-full-keys',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "claim_skips_full_keys: each tenant's pick by priority passes over a full key's tasks",
    find: `           and (t.concurrency_key is null or (not \${KEY_IS_FULL} and \${KEY_NOT_BUSY}))\` : ''}
         order by t.priority desc, t.run_at, t.id`,
    replace: `           and (t.concurrency_key is null or \${KEY_NOT_BUSY})\` : ''}
         order by t.priority desc, t.run_at, t.id`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'passes over the full key next',
  },
  {
    id: 'claim-full-keys-less-frees',
    file: CONCURRENCY,
    statement: 'tasks_claim_runnable',
    guard: 'claim_skips_full_keys: a key with frees no claim has counted yet is not full',
    find: `                    and s.running - \${UNCOUNTED_FREES} >= s.max_running)\``,
    replace: `                    and s.running >= s.max_running)\``,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'leaves the tasks over the limit runnable',
  },
  {
    id: 'claim-parks-passed',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "park_passed_full_keys: a full key's tasks the scan passed over are parked",
    find: `and not t.parked and t.queue = $2::text and (t.vtime, t.id) < (l.vtime, l.id)`,
    replace: `and not t.parked and t.queue = $2::text and false`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'one sweep claims past full batches|parks the tasks of a full key',
  },
  {
    id: 'claim-parks-only-passed',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "park_passed_full_keys: a full key's tasks behind the batch's last slot are not parked",
    find: `and not t.parked and t.queue = $2::text and (t.vtime, t.id) < (l.vtime, l.id)`,
    replace: `and not t.parked and t.queue = $2::text and (t.vtime, t.id) <> (l.vtime, l.id)`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'does not park the tasks of a full key',
  },
  {
    id: 'claim-held-keeps-vtime',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "a task held back by its key takes the vtime the priority order gave it (the tenant's vtimes kept)",
    find: `     where t.id = d.id and not d.takes_slot and not d.deferred and t.vtime <> d.vtime`,
    replace: `     where t.id = d.id and not d.takes_slot and not d.deferred and false`,
    tests: ['test/tasks/concurrency.test.ts'],
    testName: 'keeps the tenant',
  },
  {
    id: 'pause-occurrences-by-live-index',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'occurrences_by_live_index: the not-started occurrences are read from the live occurrences\' index',
    find: `where t.schedule_id = target.id and t.scheduled_for > clock.now and \${LIVE} and \${NOT_STARTED}`,
    replace: `where t.schedule_id = target.id and t.scheduled_for > clock.now and \${NOT_STARTED}`,
    also: [
      {
        file: SCHEDULES,
        find: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and \${LIVE} and \${NOT_STARTED}`,
        replace: `where t.schedule_id = target.id and t.scheduled_for <= clock.now and \${NOT_STARTED}`,
      },
    ],
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'pause-cancels-by-id',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'occurrences_by_live_index: the due occurrences are cancelled by id',
    find: `     from clock
     where t.id = any(array(select due.id from due))`,
    replace: `     from due, clock
     where t.id = due.id`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'delete-occurrences-by-live-index',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'occurrences_by_live_index: the not-started occurrences are read from the live occurrences\' index',
    find: `where s.tenant = $2::text and s.name = $3::text and \${LIVE} and \${NOT_STARTED}`,
    replace: `where s.tenant = $2::text and s.name = $3::text and \${NOT_STARTED}`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-tasks-by-ids',
    file: MAINTENANCE,
    statement: 'tasks_purge_finished',
    guard: 'purge_by_ids: the doomed tasks are deleted by id',
    find: `delete from tasks t where t.id = any(array(select doomed.id from doomed))`,
    replace: `delete from tasks t using doomed where t.id = doomed.id`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-attempts-by-ids',
    file: MAINTENANCE,
    statement: 'tasks_purge_finished (attempts_purged)',
    guard: "purge_by_ids: the deleted tasks' attempts are deleted by task id",
    find: `delete from task_attempts a where a.task_id = any(array(select deleted.id from deleted))`,
    replace: `delete from task_attempts a using deleted where a.task_id = deleted.id`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-marks-by-ids',
    file: MAINTENANCE,
    statement: 'tasks_purge_finished (marks_purged)',
    guard: 'purge_by_ids: the old marks are deleted by claim token',
    find: `delete from dispatch_marks m where m.claim_token = any(array(`,
    replace: `delete from dispatch_marks m where m.claim_token in (select o.claim_token from (`,
    also: [
      {
        file: MAINTENANCE,
        find: `       limit $3::int))
   ),
   kept as`,
        replace: `       limit $3::int) o)
   ),
   kept as`,
      },
    ],
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-spent-keys-by-address',
    file: MAINTENANCE,
    statement: 'spent_idempotency_keys_purge',
    guard: 'purge_by_ids: the old spent keys are deleted by row address',
    find: `   where s.ctid = any(array(
     select ctid from spent_idempotency_keys`,
    replace: `   where (s.tenant, s.idempotency_key) in (select * from (
     select tenant, idempotency_key from spent_idempotency_keys`,
    also: [
      {
        file: MAINTENANCE,
        find: `     limit $3::int))
   returning 1`,
        replace: `     limit $3::int) o)
   returning 1`,
      },
    ],
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'purge-lines-by-address',
    file: CONCURRENCY,
    statement: 'flow_control_purge_idle',
    guard: 'purge_by_ids: the idle lines are deleted by the locked rows\' addresses',
    find: `     select r.ctid as tid from rate_limits r`,
    replace: `     select r.tenant, r.key from rate_limits r`,
    also: [
      {
        file: CONCURRENCY,
        find: `delete from rate_limits l where l.ctid = any(array(select i.tid from idle_rates i))`,
        replace: `delete from rate_limits l using idle_rates i where l.tenant = i.tenant and l.key = i.key`,
      },
      {
        file: CONCURRENCY,
        find: `     select r.ctid as tid from rate_start_lines r`,
        replace: `     select r.tenant, r.key from rate_start_lines r`,
      },
      {
        file: CONCURRENCY,
        find: `delete from rate_start_lines l where l.ctid = any(array(select i.tid from idle_start_lines i))`,
        replace: `delete from rate_start_lines l using idle_start_lines i where l.tenant = i.tenant and l.key = i.key`,
      },
    ],
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'wake-skips-parked-keys',
    file: DISPATCH,
    statement: 'tasks_wake_parked',
    guard: 'wake_skips_parked_keys: the keys with parked tasks come from a skip scan, one probe per key',
    find: `parked_keys as (
     (select p.tenant, p.concurrency_key as key from tasks p
      where p.status = 'queued' and p.parked
      order by p.tenant, p.concurrency_key limit 1)
     union all
     select n.tenant, n.key from parked_keys k cross join lateral (
       select p.tenant, p.concurrency_key as key from tasks p
       where p.status = 'queued' and p.parked and (p.tenant, p.concurrency_key) > (k.tenant, k.key)
       order by p.tenant, p.concurrency_key limit 1) n
   ),`,
    replace: `parked_keys as (
     select distinct p.tenant, p.concurrency_key as key from tasks p where p.status = 'queued' and p.parked
   ),`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'wake-updates-by-id',
    file: DISPATCH,
    statement: 'tasks_wake_parked',
    guard: 'wake_skips_parked_keys: the woken tasks are updated by id',
    find: `update tasks t set parked = false where t.id = any(array(select w.id from woken w))`,
    replace: `update tasks t set parked = false from woken w where t.id = w.id`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'wake-parked-frees',
    file: DISPATCH,
    statement: 'tasks_wake_parked',
    guard: "the safety net counts the frees no claim has counted yet as room",
    find: `lateral (select \${RUNNING_NOW} as running) h`,
    replace: `lateral (select s.running as running) h`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slot-ledger',
    file: 'migrations/0034_parked_by_priority.sql',
    statement: 'concurrency_slots_free',
    guard: 'a task leaving running records its free',
    find: `insert into concurrency_frees (tenant, key, n) values (p_tenant, p_key, n);`,
    replace: `perform 1;`,
    tests: ['test/tasks/concurrency.test.ts'],
  },

  // Slots freed by the statements that take a task out of running (migration 0020, freeSlotsOf).
  {
    id: 'free-slots-release',
    file: DISPATCH,
    statement: 'tasks_release_if_undispatched',
    guard: 'a claim given back frees its slot',
    find: `\${freeSlotsOf('released')}`,
    replace: `\${freeSlotsOf('(select * from released where false)')}`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-start-paused',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'a start refused for a paused queue frees its slot',
    find: `(select tenant, concurrency_key from refused\${rated ?`,
    replace: `(select tenant, concurrency_key from refused where false\${rated ?`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-start-rate',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'a start refused over its rate frees its slot',
    find: `' union all select tenant, concurrency_key from rate_refused'`,
    replace: `' union all select tenant, concurrency_key from rate_refused where false'`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-finish',
    file: FENCE,
    statement: 'tasks_finish_if_running',
    guard: 'a finish frees its slot',
    find: `\${freeSlotsOf('finished')}`,
    replace: `\${freeSlotsOf('(select * from finished where false)')}`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-reap',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'a lease reaped frees its slot',
    find: `\${freeSlotsOf('reaped')}`,
    replace: `\${freeSlotsOf('(select * from reaped where false)')}`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-cancel',
    file: TASK_READS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'a cancel frees the slot of a task claimed early',
    find: `(select x.tenant, x.concurrency_key from target x join cancelled c on c.id = x.id where x.status = 'running')`,
    replace: `(select x.tenant, x.concurrency_key from target x join cancelled c on c.id = x.id where false)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-cancel-running-only',
    file: TASK_READS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'only a task that was running (claimed early) had a slot to free',
    find: `(select x.tenant, x.concurrency_key from target x join cancelled c on c.id = x.id where x.status = 'running')`,
    replace: `(select x.tenant, x.concurrency_key from target x join cancelled c on c.id = x.id where true)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-bulk-cancel',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'a bulk cancel frees the slots of the tasks claimed early',
    find: `join cancelled c on c.id = p.id where p.status = 'running')`,
    replace: `join cancelled c on c.id = p.id where false)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-bulk-cancel-running-only',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'only the tasks that were running (claimed early) had slots to free',
    find: `join cancelled c on c.id = p.id where p.status = 'running')`,
    replace: `join cancelled c on c.id = p.id where true)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-enqueue-claim-undone',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'a reschedule by key undoing an early claim frees its slot',
    find: `then concurrency_slots_free(t.tenant, t.concurrency_key, 1, $14::text[]) = 0`,
    replace: `then $14::text[] is null`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-spare-batch-keys',
    file: 'migrations/0034_parked_by_priority.sql',
    statement: 'concurrency_slots_free (from tasks_insert_batch)',
    guard: "the enqueue's wake spares the tasks of the batch's keys (a row rewritten twice in one statement)",
    find: `and (spare_keys is null or p.idempotency_key is null
                          or p.idempotency_key <> all (array_remove(spare_keys, null)))`,
    replace: `and true`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-schedule-pause-withdrawn',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'occurrences withdrawn by a pause free their slots',
    find: `(select w.tenant, w.concurrency_key from withdrawn w where w.status = 'running'
                    union all`,
    replace: `(select w.tenant, w.concurrency_key from withdrawn w where false
                    union all`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-schedule-pause-withdrawn-running-only',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'only the withdrawn occurrences that were running (claimed early) had slots',
    find: `(select w.tenant, w.concurrency_key from withdrawn w where w.status = 'running'
                    union all`,
    replace: `(select w.tenant, w.concurrency_key from withdrawn w where true
                    union all`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-schedule-pause-cancelled',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'due occurrences cancelled by a pause free their slots',
    find: `select d.tenant, d.concurrency_key from due d join cancelled c on c.id = d.id where d.status = 'running')`,
    replace: `select d.tenant, d.concurrency_key from due d join cancelled c on c.id = d.id where false)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-schedule-withdraw',
    file: SCHEDULES,
    statement: 'schedules_withdraw_planned_if_not_started',
    guard: 'occurrences withdrawn by a replacement free their slots',
    find: `(select w.tenant, w.concurrency_key from withdrawn w where w.status = 'running')`,
    replace: `(select w.tenant, w.concurrency_key from withdrawn w where false)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'free-slots-schedule-cancel-pending',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'occurrences cancelled by a delete free their slots',
    find: `(select p.tenant, p.concurrency_key from pending p join cancelled c on c.id = p.id where p.status = 'running')`,
    replace: `(select p.tenant, p.concurrency_key from pending p join cancelled c on c.id = p.id where false)`,
    tests: ['test/tasks/concurrency.test.ts'],
  },

  // The tenants' pending counts (migration 0021, countPendingOf): every statement
  // into or out of pending keeps them; maxPendingTasks reads them.
  {
    id: 'pending-count-enqueue',
    file: ENQUEUE,
    statement: 'tasks_insert_batch, tasks_insert_batch_plain',
    guard: 'an enqueue counts the tasks it created',
    find: `'(select $2::text as tenant from written w where w.created)'`,
    replace: `'(select $2::text as tenant from written w where false)'`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-enqueue-created-only',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'a reschedule or deduplication by key adds nothing',
    find: `'(select $2::text as tenant from written w where w.created)'`,
    replace: `'(select $2::text as tenant from written w)'`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-replay',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: 'a replay counts the tasks it created',
    find: `\${countPendingOf('pending_counted', '+', 'written')}`,
    replace: `\${countPendingOf('pending_counted', '+', '(select * from written where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-trigger',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_trigger_occurrence',
    guard: 'a trigger counts its occurrence',
    find: `\${countPendingOf('pending_counted', '+', 'written')}`,
    replace: `\${countPendingOf('pending_counted', '+', '(select * from written where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-materialize',
    file: SCHEDULES,
    statement: 'schedules_fire_occurrences',
    guard: 'occurrences materialized count (missed ones do not)',
    find: `"(select tenant from inserted where status <> 'missed')"`,
    replace: `"(select tenant from inserted where false)"`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-materialize-missed',
    file: SCHEDULES,
    statement: 'schedules_fire_occurrences',
    guard: 'a missed occurrence is born finished and never counts',
    find: `"(select tenant from inserted where status <> 'missed')"`,
    replace: `"(select tenant from inserted)"`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-finish-retry',
    file: FENCE,
    statement: 'tasks_finish_if_running (pending_counted)',
    guard: 'a failure retried stays pending',
    find: `(select tenant from finished where status in ('succeeded', 'dead'))`,
    replace: `(select tenant from finished)`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-reap',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'a lease reaped with no attempt left counts out',
    find: `"(select tenant from reaped where next_status = 'dead')"`,
    replace: `"(select tenant from reaped where false)"`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-cancel',
    file: TASK_READS,
    statement: 'tasks_cancel_if_not_started',
    guard: 'a cancel counts out',
    find: `\${countPendingOf('pending_counted', '-', 'cancelled')}`,
    replace: `\${countPendingOf('pending_counted', '-', '(select * from cancelled where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-bulk-cancel',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: 'a bulk cancel counts out',
    find: `\${countPendingOf('pending_counted', '-', 'cancelled')}`,
    replace: `\${countPendingOf('pending_counted', '-', '(select * from cancelled where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-schedule-pause',
    file: SCHEDULES,
    statement: 'schedules_pause_withdraw_occurrences',
    guard: 'a pause counts out what it withdraws and cancels',
    find: `'(select tenant from withdrawn union all select tenant from cancelled)'`,
    replace: `'(select tenant from withdrawn where false union all select tenant from cancelled where false)'`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-schedule-withdraw',
    file: SCHEDULES,
    statement: 'schedules_withdraw_planned_if_not_started',
    guard: 'a replacement counts out what it withdraws',
    find: `\${countPendingOf('pending_counted', '-', 'withdrawn')}`,
    replace: `\${countPendingOf('pending_counted', '-', '(select * from withdrawn where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  {
    id: 'pending-count-schedule-cancel-pending',
    file: SCHEDULES,
    statement: 'schedules_cancel_pending_occurrences',
    guard: 'a delete counts out the occurrences it cancels',
    find: `\${countPendingOf('pending_counted', '-', 'cancelled')}`,
    replace: `\${countPendingOf('pending_counted', '-', '(select * from cancelled where false)')}`,
    tests: ['test/tenants/quotas.test.ts'],
  },
  // -------------------------------------------------------------------------
  // Plans of the fenced batch writes on a pooled connection (issue 12): no
  // rescan of the batch per task row, no read of tasks beyond the batch.
  {
    id: 'fenced-batch-rows-hashed',
    file: TASKS_SHARED,
    statement: 'tasks_start_if_claimed, tasks_finish_if_running',
    guard: 'the batch from generate_subscripts (estimated at 1,000 rows): the generic plan hashes its join to the tasks',
    find: `\`select \${columns.map(([name, param]) => \`(\${param})[b.i] as \${name}\`).join(', ')}
     from generate_subscripts(\${columns[0]![1]}, 1) as b(i)\`;`,
    replace: `\`select * from unnest(\${columns.map(([, param]) => param).join(', ')}) as b(\${columns.map(([name]) => name).join(', ')})\`;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'claim-updates-by-id',
    file: DISPATCH,
    statement: 'tasks_claim_runnable_plain',
    guard: 'updates_by_id: the claimed tasks, joined alone, read every queued task',
    find: `where \${flow ? '' : 't.id = any(array(select x.id from decided x where x.takes_slot)) and '}t.id = d.id and d.takes_slot`,
    replace: `where t.id = d.id and d.takes_slot`,
    tests: ['test/tasks/plans.test.ts'],
    testName: 'claims a plain batch reading only the batch',
  },
  {
    id: 'promote-updates-by-id',
    file: MAINTENANCE,
    statement: 'tasks_promote_due',
    guard: 'updates_by_id: the promoted tasks, joined alone, read every scheduled task',
    find: `where t.id = any(array(select x.id from rows x)) and t.id = r.id`,
    replace: `where t.id = r.id`,
    tests: ['test/tasks/plans.test.ts'],
    testName: 'promotes a batch of tasks due at one instant',
  },
  {
    id: 'promote-due-in-order',
    file: 'migrations/0035_due_in_promote_order.sql',
    statement: 'index tasks_due_order_idx',
    guard: 'the due index in the promote\'s order: by run_at alone, a promote read every task due at one instant',
    find: `on tasks (run_at, id) where status = 'scheduled'`,
    replace: `on tasks (run_at) where status = 'scheduled'`,
    tests: ['test/tasks/plans.test.ts'],
    testName: 'promotes a batch of tasks due at one instant',
  },
  {
    id: 'reap-updates-by-id',
    file: MAINTENANCE,
    statement: 'tasks_reap_expired',
    guard: 'updates_by_id: the reaped tasks, joined alone, read every running task again',
    find: `where t.id = any(array(select x.id from expired x)) and t.id = e.id`,
    replace: `where t.id = e.id`,
    tests: ['test/tasks/plans.test.ts'],
    testName: 'reaps a batch of expired leases',
  },
  {
    id: 'bulk-cancel-updates-by-id',
    file: 'src/db/sql/bulkCancel.ts',
    statement: 'tasks_cancel_matching_if_not_started',
    guard: "updates_by_id: the cancelled tasks, joined alone, read every task",
    find: `     from clock
     -- updates_by_id (tasks-shared.ts): by the ids alone (joined to picked
     -- beside them, a generic plan looked all of them up again for each).
     where t.id = any(array(select p.id from picked p))`,
    replace: `     from picked, clock
     where t.id = picked.id`,
    tests: ['test/tasks/plans.test.ts'],
    testName: "bulk-cancels a batch of a tenant's waiting tasks",
  },
  {
    id: 'mark-reads-its-ids',
    file: DISPATCH,
    statement: 'dispatch_marks_insert',
    guard: 'mark_reads_its_ids: joined only through the unnest, a plan hashed tasks whole',
    find: `left join tasks cur on cur.id = s.id and cur.id = any($3::bigint[])`,
    replace: `left join tasks cur on cur.id = s.id and $3::bigint[] is not null`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-rate-refused-by-ids',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'rate_refused names its rows by the refused ids: joined alone, it read tasks_running_idx whole',
    find: `where t.id = any(array(select x.id from rate_decided x where x.over)) and t.id = rd.id`,
    replace: `where t.id = rd.id`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-rate-one-row-per-key',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: "rate_keys holds one row per key (its count and step), so rate_starts moves each key's line once",
    find: `     where n.pos = n.n`,
    replace: `     where true`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-now-skips-rate-tasks',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'started_now_skips_rate_tasks: the unrated starts of the whole statement read only the tasks rate_tasks did not take',
    find: `const NOT_RATE_TASKS = 'array(select m.id from msg m where m.id not in (select r.id from rate_tasks r))';`,
    replace: `const NOT_RATE_TASKS = '$2::bigint[]';`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-places-materialized',
    file: FENCE,
    statement: 'tasks_start_if_claimed',
    guard: 'the places are materialized (estimated like the batch): inlined, the update rescanned them per task row',
    find: `   places as materialized (`,
    replace: `   places as (`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-paused-asked-per-task',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'paused_asked_once: with no queue paused, no queue row is read per task',
    find: `const NO_QUEUE_PAUSED = \`(select true from queues p where p.paused limit 1) is null\`;`,
    replace: `const NO_QUEUE_PAUSED = \`(select true from queues p where p.paused limit 1) is null and false\`;`,
    tests: ['test/tasks/plans.test.ts'],
  },
  {
    id: 'start-paused-gate-inverted',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'paused_asked_once: with a queue paused, each task reads its own queue\'s flag',
    find: `const NO_QUEUE_PAUSED = \`(select true from queues p where p.paused limit 1) is null\`;`,
    replace: `const NO_QUEUE_PAUSED = \`(select true from queues p where p.paused limit 1) is not null\`;`,
    tests: ['test/tasks/lookahead.test.ts', 'test/tasks/plans.test.ts'],
  },
  // -------------------------------------------------------------------------
  // The fenced start without the rate limits' CTEs (issue 12): the messages'
  // word picks it; a rate-limited task never starts off its line through it.
  {
    id: 'start-unrated-no-rated-start',
    file: FENCE,
    statement: 'tasks_start_if_claimed_unrated',
    guard: 'the statement without the lines starts no rate-limited task (t.rate_key is null)',
    find: `and t.status = 'running' and t.started_at is null and t.rate_key is null
       and (\${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))`,
    replace: `and t.status = 'running' and t.started_at is null and (t.rate_key is null or \${!rated})
       and (\${NO_QUEUE_PAUSED} or not exists (select 1 from queues q where q.name = t.queue and q.paused))`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-unrated-skips-rated',
    file: FENCE,
    statement: 'tasks_start_if_claimed_unrated',
    guard: 'start_unrated_skips_rated: a due rate-limited task it did not start comes back `rated`, for the whole statement',
    find: `when cur.rate_key is not null and cur.lease_epoch = m.epoch and cur.status = 'running'`,
    replace: `when false and cur.lease_epoch = m.epoch and cur.status = 'running'`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'start-early-rated',
    file: FENCE,
    statement: 'tasks_start_if_claimed, tasks_start_if_claimed_unrated',
    guard: 'an early task says it is rate-limited, so its start once due takes the whole statement at once',
    find: `then 'early' end,
          cur.rate_key is not null`,
    replace: `then 'early' end,
          false`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rated-sent-by-key',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "rated_sent_by_key: a claim's rate-limited tasks go out after the rest, each key's together",
    find: `order by rate_key collate "C" nulls first, vtime, id)`,
    replace: `order by vtime, id)`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rated',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "a claimed task's message says whether it is rate-limited",
    find: `t.rate_key is not null as rated,`,
    replace: `false as rated,`,
    tests: ['test/tasks/rate-limit.test.ts', 'test/tasks/plans.test.ts'],
  },
  // -------------------------------------------------------------------------
  // admin_reads_by_tenant (migration 0030): the admin's key and tenant lists
  // read their tenant indexes in order.
  {
    id: 'admin-keys-of-tenant-by-index',
    file: TENANTS,
    statement: 'api_keys_list_of_tenant',
    guard: "one tenant's keys are asked by tenant alone, which a generic plan takes from api_keys_tenant_idx",
    find: `where tenant = $1::text
   order by id desc limit $2::int`,
    replace: `where ($1::text is null or tenant = $1::text)
   order by id desc limit $2::int`,
    tests: ['test/tenants/admin-plans.test.ts'],
  },
  {
    id: 'admin-keys-tenant-index',
    file: 'migrations/0030_admin_reads_by_tenant.sql',
    statement: 'api_keys_tenant_idx',
    guard: "api_keys in (tenant, id) order: one tenant's keys and the tenant picker",
    find: `create index if not exists api_keys_tenant_idx on api_keys (tenant, id);`,
    replace: `select 1;`,
    tests: ['test/tenants/admin-plans.test.ts'],
  },
  {
    id: 'admin-tenants-tenant-index',
    file: 'migrations/0030_admin_reads_by_tenant.sql',
    statement: 'tenants_tenant_idx',
    guard: 'tenants in tenant order: the tenant picker',
    find: `create index if not exists tenants_tenant_idx on tenants (tenant);`,
    replace: `select 1;`,
    tests: ['test/tenants/admin-plans.test.ts'],
  },
  // -------------------------------------------------------------------------
  // key_spent_once_ran: a key held by a task that ever ran is spent.
  {
    id: 'enqueue-key-spent-once-ran',
    file: ENQUEUE,
    statement: 'tasks_insert_batch',
    guard: 'key_spent_once_ran: a retry waiting ran once, so its key deduplicates and never reschedules',
    find: 'const KEY_HELD = `(${NOT_STARTED} and ${NEVER_RAN})`;',
    replace: 'const KEY_HELD = `(${NOT_STARTED} and true)`;',
    tests: ['test/tasks/idempotency.test.ts'],
  },
  {
    id: 'enqueue-never-ran-by-start',
    file: TASKS_SHARED,
    statement: 'tasks_insert_batch (NEVER_RAN)',
    guard: 'an attempt that never started a handler (a dispatch lost) leaves the key reschedulable',
    find: 'where a.task_id = t.id and a.started_at is not null)',
    replace: 'where a.task_id = t.id)',
    tests: ['test/tasks/idempotency.test.ts'],
  },
  // -------------------------------------------------------------------------
  // slot_limit_of_newest: every statement that creates tasks writes its key's limit.
  {
    id: 'slot-limits-newest',
    file: CONCURRENCY,
    statement: 'slotLimitsOf (the enqueue, occurrences, trigger, replay)',
    guard: 'the newest task of a key in the statement sets its limit',
    find: 'order by n.tenant, n.key, n.ord desc',
    replace: 'order by n.tenant, n.key, n.ord',
    tests: ['test/tasks/concurrency.test.ts'],
  },
  {
    id: 'slot-limits-occurrences',
    file: SCHEDULES,
    statement: 'schedules_fire_occurrences',
    guard: "a schedule's occurrences set their key's limit",
    find: `from inserted i where i.status <> 'missed')`,
    replace: `from inserted i where false)`,
    tests: ['test/http/flow-control.test.ts'],
  },
  {
    id: 'slot-limits-trigger',
    file: 'src/db/sql/trigger.ts',
    statement: 'schedules_trigger_occurrence',
    guard: "a triggered occurrence sets its key's limit",
    find: `w.id as ord from written w)`,
    replace: `w.id as ord from written w where false)`,
    tests: ['test/http/flow-control.test.ts'],
  },
  {
    id: 'slot-limits-replay',
    file: 'src/db/sql/replay.ts',
    statement: 'tasks_replay_terminal',
    guard: "a replay sets its key's limit",
    find: `w.id as ord from written w)`,
    replace: `w.id as ord from written w where false)`,
    tests: ['test/http/flow-control.test.ts'],
  },
  // -------------------------------------------------------------------------
  // rate_limit_of_newest (migration 0032): a claim of older tasks keeps the newest task's limit.
  {
    id: 'claim-rate-limit-of-newest',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "rate_limit_of_newest: the key's row holds a newer task's limit than the batch's newest",
    find: `case when k.limit_task_id > n.id then k.max_starts else n.rate_limit end as max_starts,`,
    replace: `n.rate_limit as max_starts,`,
    also: [
      {
        file: DISPATCH,
        find: `case when k.limit_task_id > n.id then k.period_seconds else n.rate_period_seconds end as period_seconds,`,
        replace: `n.rate_period_seconds as period_seconds,`,
      },
    ],
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-keys-per-tenant',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "rate_keys holds a row per tenant's key: another tenant's tasks with the same key keep their own reservations",
    find: `where x.rate_key is not null group by x.tenant, x.rate_key)) n`,
    replace: `where x.rate_key is not null group by x.rate_key)) n`,
    tests: ['test/tasks/rate-limit.test.ts'],
  },
  {
    id: 'claim-rate-limit-kept-on-conflict',
    file: DISPATCH,
    statement: 'tasks_claim_runnable',
    guard: "a claim whose read of the key predates a newer task's claim keeps that claim's limit",
    find: `max_starts = case when excluded.limit_task_id >= l.limit_task_id then excluded.max_starts else l.max_starts end,`,
    replace: `max_starts = excluded.max_starts,`,
    also: [
      {
        file: DISPATCH,
        find: `period_seconds = case when excluded.limit_task_id >= l.limit_task_id then excluded.period_seconds else l.period_seconds end,`,
        replace: `period_seconds = excluded.period_seconds,`,
      },
    ],
    tests: ['test/tasks/rate-limit.test.ts'],
  },
];
