// Hostile input, at volume: at least 500 malformed or hostile bodies per
// write route. Every answer must be a 4xx carrying error.code (never a 5xx),
// and nothing may change in the database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/db.ts';
import { seeded } from '../helpers/faults.ts';
import { createTestApi } from '../helpers/http.ts';

const PER_ROUTE = 520;
const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;

beforeAll(async () => {
  api = createTestApi(t.db);
  // Some state to be left alone.
  await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 3600, idempotencyKey: 'keep' } });
  await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: false } });
});

const snapshot = async () => ({
  tasks: await t.db.query('select * from tasks order by id'),
  schedules: await t.db.query('select * from schedules order by id'),
  tenants: await t.db.query('select * from tenants order by queue, tenant'),
  queues: await t.db.query('select * from queues order by name'),
  keys: await t.db.query('select * from api_keys order by id'),
});

const HOSTILE: unknown[] = [
  null, true, false, 0, -1, 1.5, -0.0001, 2 ** 53 + 2, 1e300, -1e300, '', ' ', 'x'.repeat(5000), '\u0000', '\ud800', '💥',
  "'; drop table tasks; --", '{"$gt": ""}', '../../etc/passwd', '<script>alert(1)</script>', '2026-13-45T99:99:99Z',
  'NaN', 'Infinity', '1e9999', [], [null], [1, 2, 3], {}, { $where: '1' }, { __proto__: { admin: true } },
  { constructor: { prototype: { polluted: true } } }, 'http://169.254.169.254/latest/meta-data/', 'file:///etc/passwd',
];

/** Raw bodies that are not a JSON object at all. */
function rawBodies(random: () => number): string[] {
  const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
  const fixed = ['', ' ', 'null', 'true', '0', '"task"', '[]', '{', '{"task":', '{"task": "noop",}', "{'task': 'noop'}", '{"task": "noop"}garbage',
    '\u0000\u0001\u0002', deep(100), deep(5000), '{"a":'.repeat(3000) + '1' + '}'.repeat(3000), '\uFEFF{"task":"noop"}x'];
  const bytes = Array.from({ length: 20 }, () => Array.from({ length: 1 + Math.floor(random() * 64) }, () => String.fromCharCode(Math.floor(random() * 256))).join(''));
  return [...fixed, ...bytes];
}

/** Takes a valid body and breaks it in one of many ways (each certainly invalid). */
function mutate(valid: Record<string, unknown>, fields: Record<string, (v: unknown) => boolean>, random: () => number): unknown {
  const pick = <T,>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  const body: Record<string, unknown> = structuredClone(valid);
  switch (Math.floor(random() * 4)) {
    case 0: {
      // An unknown field.
      const unknown = ['extra', 'tenant', 'admin', 'id', 'status', '__proto__x', 'Task', 'RUNAT'].filter((k) => !(k in fields));
      body[pick(unknown)] = pick(HOSTILE);
      return body;
    }
    case 1: {
      // A required field removed, or the whole body replaced.
      const required = Object.keys(valid).filter((k) => fields[k] && !fields[k]!(undefined));
      if (required.length > 0) {
        delete body[pick(required)];
        return body;
      }
      return pick([null, [], 'body', 42, [valid]]);
    }
    default: {
      // A field given a value its schema refuses.
      const field = pick(Object.keys(fields));
      const refused = HOSTILE.filter((v) => !fields[field]!(v));
      body[field] = pick(refused);
      return body;
    }
  }
}

function bodies(valid: Record<string, unknown>, fields: Record<string, (v: unknown) => boolean>, seed: number): { raw?: string; body?: unknown }[] {
  const random = seeded(seed);
  const out: { raw?: string; body?: unknown }[] = rawBodies(random).map((raw) => ({ raw }));
  while (out.length < PER_ROUTE) out.push({ body: mutate(valid, fields, random) });
  return out;
}

// What each field accepts, as predicates the generator uses to be sure it is refused.
const isQueue = (v: unknown) => typeof v === 'string' && /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/.test(v);
const optional = (p: (v: unknown) => boolean) => (v: unknown) => v === undefined || p(v);
const taskFields = {
  task: (v: unknown) => v === 'noop',
  payload: optional((v) => typeof v === 'object' && v !== null && !Array.isArray(v)),
  queue: optional(isQueue),
  delay: optional((v) => typeof v === 'number' && v >= 0 && v <= 365 * 86_400),
  maxAttempts: optional((v) => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 100),
  idempotencyKey: optional((v) => typeof v === 'string' && v.length >= 1 && v.length <= 256),
};
const validTask = { task: 'noop', payload: { a: 1 }, queue: 'default', delay: 5, maxAttempts: 3, idempotencyKey: 'k-fuzz' };

describe('fuzzing every write route', () => {
  it(`${PER_ROUTE} hostile bodies per route: all 4xx with error.code, nothing changed`, async () => {
    const before = await snapshot();
    const routes: { method: string; path: string; cases: { raw?: string; body?: unknown }[] }[] = [
      { method: 'POST', path: '/v1/tasks', cases: bodies(validTask, taskFields, 1) },
      {
        method: 'POST',
        path: '/v1/tasks/batch',
        cases: bodies({ tasks: [validTask] }, { tasks: (v) => Array.isArray(v) && v.length === 1 && v[0] === validTask }, 2).map((c, i) =>
          // Half the cases hide one hostile task among valid ones.
          i % 2 && c.body !== undefined ? { body: { tasks: [{ task: 'noop' }, mutate(validTask, taskFields, seeded(i)), { task: 'noop' }] } } : c,
        ),
      },
      { method: 'POST', path: '/v1/admin/keys', cases: bodies({ tenant: 'acme' }, { tenant: isQueue }, 3) },
      {
        method: 'PUT',
        path: '/v1/admin/tenants/acme',
        cases: bodies({ queue: 'default', weight: 2 }, { queue: optional(isQueue), weight: (v) => typeof v === 'number' && v > 0 && v <= 1000 }, 4),
      },
      { method: 'PUT', path: '/v1/admin/queues/default', cases: bodies({ paused: true }, { paused: (v) => typeof v === 'boolean' }, 5) },
      {
        method: 'PUT',
        path: '/v1/schedules/fuzzed',
        cases: bodies(
          { task: 'noop', cron: '*/5 * * * *', timezone: 'Europe/Paris', misfire: 'skip', catchUpLimit: 10 },
          {
            task: (v) => v === 'noop',
            cron: (v) => v === '*/5 * * * *' || v === '* * * * *',
            timezone: optional((v) => typeof v === 'string' && ['UTC', 'Europe/Paris'].includes(v)),
            misfire: optional((v) => v === 'run_once' || v === 'catch_up' || v === 'skip'),
            catchUpLimit: optional((v) => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 1000),
          },
          6,
        ),
      },
    ];
    let total = 0;
    for (const route of routes) {
      expect(route.cases.length).toBeGreaterThanOrEqual(500);
      for (const c of route.cases) {
        const r = await api.admin(route.method, route.path, c.raw !== undefined ? { raw: c.raw } : { body: c.body });
        const shown = `${route.method} ${route.path} ${c.raw !== undefined ? JSON.stringify(c.raw).slice(0, 120) : JSON.stringify(c.body)?.slice(0, 200)}`;
        expect(r.status, shown).toBeGreaterThanOrEqual(400);
        expect(r.status, shown).toBeLessThan(500);
        expect(typeof r.body?.error?.code, shown).toBe('string');
        total += 1;
      }
    }
    // Hostile ids and keys on the delete routes.
    for (const id of ['0', '-1', '1.5', 'abc', '9'.repeat(30), "1' or '1'='1", '%00', '..%2F..']) {
      const r = await api.admin('DELETE', `/v1/tasks/${id}`);
      expect(r.status, id).toBeGreaterThanOrEqual(400);
      expect(r.status, id).toBeLessThan(500);
      total += 1;
    }
    // Hostile names on the schedule routes.
    for (const name of ['%20', 'a'.repeat(200), '..', '%2F', "x'--"]) {
      for (const [method, suffix] of [['GET', ''], ['DELETE', ''], ['POST', '/pause'], ['GET', '/next?count=5']] as const) {
        const r = await api.admin(method, `/v1/schedules/${name}${suffix}`);
        expect(r.status, `${method} ${name}${suffix}`).toBeGreaterThanOrEqual(400);
        expect(r.status, `${method} ${name}${suffix}`).toBeLessThan(500);
        total += 1;
      }
    }
    expect(total).toBeGreaterThanOrEqual(6 * 500);
    expect(await snapshot()).toEqual(before);
  }, 120_000);
});
