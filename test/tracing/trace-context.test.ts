// W3C trace context: parsing by the spec's rules, the child a delivery sends,
// what an enqueue stores, and the consumer's log lines carrying the trace id.
import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTask } from '../../src/handlers/registry.ts';
import { childTraceparent, readTraceContext, traceIdOf } from '../../src/tracing/trace-context.ts';
import { taskTypes } from '../../functions/tasks.ts';
import { createRegistry } from '../../src/handlers/registry.ts';
import { enqueueTasks } from '../../src/tasks/enqueue.ts';
import { at, resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { createHarness } from '../helpers/harness.ts';
import { ADMIN_TOKEN, createTestApi } from '../helpers/http.ts';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('readTraceContext', () => {
  it.each([
    ['valid', TP, TP],
    ['upper case, normalised', TP.toUpperCase(), TP],
    ['a future version, read as 00', `cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future`, TP],
    ['version ff', TP.replace(/^00/, 'ff'), null],
    ['all-zero trace id', '00-00000000000000000000000000000000-00f067aa0ba902b7-01', null],
    ['all-zero parent id', '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', null],
    ['version 00 with trailing data', `${TP}-x`, null],
    ['short', '00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01', null],
    ['NUL inside', `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u0000`, null],
    ['absent', undefined, null],
  ])('%s', (_name, header, expected) => {
    expect(readTraceContext(header, null)?.traceparent ?? null).toBe(expected);
  });

  it('keeps a usable tracestate and drops a hostile or oversized one', () => {
    expect(readTraceContext(TP, 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7')?.tracestate).toBe('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
    expect(readTraceContext(TP, 'a=\u0000b')).toEqual({ traceparent: TP, tracestate: null });
    expect(readTraceContext(TP, `a=${'x'.repeat(600)}`)?.tracestate).toBeNull();
    expect(readTraceContext(TP, 'a=\ud800')?.tracestate).toBeNull();
    expect(readTraceContext('garbage', 'a=b')).toBeNull();
  });

  it('a child keeps the trace id and flags with a fresh parent id', () => {
    const child = childTraceparent(TP);
    expect(child).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
    expect(child.slice(36, 52)).not.toBe('00f067aa0ba902b7');
    expect(childTraceparent(TP)).not.toBe(child);
    expect(traceIdOf(child)).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
  });
});

describe('enqueue and consume with a trace', () => {
  const t = useTestDatabase();
  beforeEach(() => resetTables(t.db));

  it('stores the request trace with the task; an invalid header is ignored, never a 4xx', async () => {
    const api = createTestApi(t.db);
    const good = await api.call('POST', '/v1/tasks', {
      token: ADMIN_TOKEN,
      body: { task: 'noop', delay: 60 },
      headers: { traceparent: TP, tracestate: 'vendor=1' },
    });
    expect(good.status).toBe(201);
    const batch = await api.call('POST', '/v1/tasks/batch', {
      token: ADMIN_TOKEN,
      body: { tasks: [{ task: 'noop', delay: 60 }, { task: 'noop', delay: 60 }] },
      headers: { traceparent: TP },
    });
    expect(batch.status).toBe(201);
    const bad = await api.call('POST', '/v1/tasks', {
      token: ADMIN_TOKEN,
      body: { task: 'noop', delay: 60 },
      headers: { traceparent: 'ff-not-a-trace', tracestate: 'x=1' },
    });
    expect(bad.status).toBe(201);
    const rows = await t.db.query<{ id: string; traceparent: string | null; tracestate: string | null }>(
      `select id, traceparent, tracestate from tasks order by id`,
    );
    expect(rows.map((r) => [r.traceparent, r.tracestate])).toEqual([
      [TP, 'vendor=1'],
      [TP, null],
      [TP, null],
      [null, null],
    ]);
    // The enqueues' dispatch kicks (work within the look-ahead) end here, not
    // in a later test, where a kick still running would claim its tasks.
    await api.settle();
  });

  it("the consumer's log lines and the handler's context carry the trace", async () => {
    const seen: unknown[] = [];
    // These tests read info lines: the harness logs at warn by default.
    const h = createHarness(t.db, {
      config: { logLevel: 'info' },
      handlers: [
        defineTask('traced', z.object({}).default({}), async (_p, ctx) => {
          seen.push(ctx.trace);
          ctx.log.info('inside the handler');
        }),
      ],
    });
    const api = createTestApi(t.db, {
      handlers: [defineTask('traced', z.object({}).default({}), async () => {})],
    });
    api.setNow(T0);
    const r = await api.call('POST', '/v1/tasks', { token: ADMIN_TOKEN, body: { task: 'traced' }, headers: { traceparent: TP } });
    expect(r.status).toBe(201);
    // The enqueue's dispatch kick claimed it into the API's outbox: consume that message.
    await api.settle();
    const sent = api.outbox.take();
    expect(sent).toHaveLength(1);
    await h.consume(sent.map((m) => m.body), { now: T0 });
    expect(seen).toEqual([{ traceparent: TP, tracestate: null }]);
    const line = h.logs.find((l) => l.msg === 'inside the handler');
    expect(line).toMatchObject({ taskId: r.body.id, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
  });

  it("the sweep's dispatch line for a traced task carries its trace id; untraced tasks add no line", async () => {
    const h = createHarness(t.db, { config: { logLevel: 'info' } });
    const deps = { db: t.db, config: h.config, registry: createRegistry(taskTypes({ config: h.config })) };
    const [traced] = await enqueueTasks(deps, 'acme', [{ task: 'noop', delay: 600 }], { now: T0, trace: readTraceContext(TP, null) });
    await enqueueTasks(deps, 'acme', [{ task: 'noop', delay: 600 }, { task: 'noop', delay: 600 }], { now: T0 });
    const counts = await h.sweep({ now: at(600) });
    expect(counts.dispatched).toBe(3);
    const lines = h.logs.filter((l) => l.msg === 'task dispatched');
    expect(lines).toEqual([expect.objectContaining({ taskId: traced!.task!.id, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' })]);
  });
});
