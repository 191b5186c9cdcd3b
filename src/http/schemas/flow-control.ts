// Flow control (issue 16): the concurrency and rate limits a task or a
// schedule sets, and the state of a key as GET /v1/concurrency/{key} and
// GET /v1/rate-limits/{key} show it.
import { z } from '@hono/zod-openapi';
import { isStorableText } from '../hostile-json.ts';
import { CONCURRENCY_KEY_MAX_LENGTH, CONCURRENCY_LIMIT_MAX, RATE_LIMIT_MAX, RATE_PERIOD_MAX_SECONDS } from '../../tasks/options.ts';

const FlowKey = z.string().min(1).max(CONCURRENCY_KEY_MAX_LENGTH);

export const ConcurrencySchema = z
  .strictObject({
    key: FlowKey,
    limit: z.int().min(1).max(CONCURRENCY_LIMIT_MAX),
  })
  .openapi('Concurrency', {
    description:
      "At most `limit` of the tenant's tasks with this `key` run at once (claimed, including claimed early, or started, and not finished), across every queue. Tasks over the limit wait, queued, and never hold back other keys. The same key with different limits: the most recently enqueued task's limit applies.",
  });

export const RateLimitSchema = z
  .strictObject({
    key: FlowKey,
    limit: z.int().min(1).max(RATE_LIMIT_MAX),
    periodSeconds: z.int().min(1).max(RATE_PERIOD_MAX_SECONDS),
  })
  .openapi('RateLimit', {
    description:
      "At most `limit` starts of the tenant's tasks with this `key` in any window of `periodSeconds` (GCRA without bursts: starts are spaced at least periodSeconds / limit apart). Tasks over the limit wait: their start (runAt) moves to when the limit allows; no attempt is spent. The same key with different limits: the most recently enqueued task's limit applies once it is claimed.",
  });

/** How a task or a schedule shows its limits. */
export const ConcurrencyJson = z.object({ key: z.string(), limit: z.int() }).nullable();
export const RateLimitJson = z.object({ key: z.string(), limit: z.int(), periodSeconds: z.int() }).nullable();

/** The `{key}` of both routes: a flow-control key, as tasks name it. */
export const FlowKeyParam = z.object({
  // A body's strings are checked whole (hostile-json.ts); a path's are not.
  key: FlowKey.refine(isStorableText, 'no NUL (\\u0000) or lone surrogates').openapi({
    param: { name: 'key', in: 'path' },
    example: 'partner',
  }),
});

export const ConcurrencySlotSchema = z
  .object({
    key: z.string(),
    running: z.int().openapi({ description: 'Tasks of this key claimed (including claimed early) or started, not finished.' }),
    limit: z.int().openapi({ description: 'The limit of the most recently enqueued task with this key.' }),
    waiting: z.int().openapi({ description: 'Due tasks of this key waiting for a slot.' }),
  })
  .openapi('ConcurrencySlot');

export const RateLimitStateSchema = z
  .object({
    key: z.string(),
    limit: z.int().openapi({ description: 'Starts per period: the limit of the most recently claimed task with this key.' }),
    periodSeconds: z.int(),
    nextStartAt: z.string().nullable().openapi({ description: "The earliest instant the key's next task may start (null: now)." }),
    waiting: z.int().openapi({ description: 'Tasks of this key that have not started yet (scheduled, queued or claimed early).' }),
  })
  .openapi('RateLimitState');
