// Type-level test, run by `npm run typecheck` (not by vitest): the client's
// plain types (packages/client/src/types.ts, which ship without zod) must
// mirror the server's zod schemas. Each line fails to compile when a field is
// added to, dropped from, retyped in or made optional in one side only, at
// any depth.
import type { z } from 'zod';
import type * as Client from '../../packages/client/src/types.ts';
import type { ConcurrencySlotSchema, RateLimitStateSchema } from '../../src/http/schemas/flow-control.ts';
import type { QueueStatsSchema } from '../../src/http/schemas/queues.ts';
import type { AttemptSchema, BulkCancelSchema, BulkReplaySchema, ReplaySchema } from '../../src/http/schemas/replay.ts';
import type { ScheduleSchema, ScheduleWriteSchema } from '../../src/http/schemas/schedules.ts';
import type { SigningSecretSchema } from '../../src/http/schemas/signing-secret.ts';
import type { MinuteStatsJson } from '../../src/http/schemas/stats.ts';
import type { SpentTaskSchema, TaskCreateSchema, TaskSchema } from '../../src/http/schemas/tasks.ts';
import type { ApiKeySchema } from '../../src/http/schemas/tenants.ts';

/** Assignable both ways. Alone this misses an optional field one side lacks, hence the key checks. */
type Mutual<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Plain<T> = Exclude<T, null | undefined>;
/** Keys of the object members of T (none for arrays, primitives and unknown). */
type KeysOf<T> = Plain<T> extends infer O ? (O extends readonly unknown[] ? never : O extends object ? keyof O : never) : never;
/** Keys that are optional in T. */
type OptionalKeys<T> = { [K in keyof T]-?: {} extends Pick<T, K> ? K : never }[keyof T];

/** true when A and B have the same fields, optional alike, of mirrored types, all the way down. */
export type Mirror<A, B> =
  Mutual<A, B> extends true
    ? Mutual<KeysOf<A>, KeysOf<B>> extends true
      ? Mutual<OptionalKeys<Plain<A>>, OptionalKeys<Plain<B>>> extends true
        ? [KeysOf<A>] extends [never]
          ? true
          : false extends { [K in KeysOf<A> & KeysOf<B>]: Mirror<Plain<A>[K & keyof Plain<A>], Plain<B>[K & keyof Plain<B>]> }[KeysOf<A> & KeysOf<B>]
            ? false
            : true
        : false
      : false
    : false;

const ok = <T extends true>(): T => true as T;

export const checks = [
  ok<Mirror<Client.TaskInput, z.input<typeof TaskCreateSchema>>>(),
  ok<Mirror<Client.Task, z.output<typeof TaskSchema>>>(),
  ok<Mirror<Client.SpentTask, z.output<typeof SpentTaskSchema>>>(),
  ok<Mirror<Client.ScheduleInput, z.input<typeof ScheduleWriteSchema>>>(),
  ok<Mirror<Client.Schedule, z.output<typeof ScheduleSchema>>>(),
  ok<Mirror<Client.QueueStats, z.output<typeof QueueStatsSchema>>>(),
  ok<Mirror<Client.ApiKey, z.output<typeof ApiKeySchema>>>(),
  ok<Mirror<Client.TaskStatus, z.output<typeof TaskSchema>['status']>>(),
  ok<Mirror<Client.SigningSecret, z.output<typeof SigningSecretSchema>>>(),
  ok<Mirror<Client.MinuteStats, MinuteStatsJson>>(),
  ok<Mirror<Client.ConcurrencySlot, z.output<typeof ConcurrencySlotSchema>>>(),
  ok<Mirror<Client.RateLimitState, z.output<typeof RateLimitStateSchema>>>(),
  ok<Mirror<Client.ReplayInput, z.input<typeof ReplaySchema>>>(),
  ok<Mirror<Client.Attempt, z.output<typeof AttemptSchema>>>(),
  ok<Mirror<Client.BulkCancelInput, z.input<typeof BulkCancelSchema>>>(),
  ok<Mirror<Client.BulkReplayInput, z.input<typeof BulkReplaySchema>>>(),
];

// The checker itself can fail: these pairs differ, and must not mirror.
export const selfChecks = [
  // @ts-expect-error an optional field one side lacks
  ok<Mirror<{ a: string; b?: number }, { a: string }>>(),
  // @ts-expect-error optional on one side only
  ok<Mirror<{ a?: string }, { a: string | undefined }>>(),
  // @ts-expect-error a nested field retyped
  ok<Mirror<{ a: { b: number } | null }, { a: { b: string } | null }>>(),
  // @ts-expect-error a nested optional field one side lacks
  ok<Mirror<{ a: { b: number; c?: string } }, { a: { b: number } }>>(),
  // @ts-expect-error an enum member missing
  ok<Mirror<'x' | 'y', 'x'>>(),
];
