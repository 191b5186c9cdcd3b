// Hostile input, at volume: at least 500 malformed or hostile bodies per
// write route. Every answer must be a 4xx carrying error.code (never a 5xx),
// and nothing may change in the database. Then the classes of issue 10
// (finding 6): NUL and lone surrogates in every string field (seeded random
// unicode), ids and cursors beyond bigint, impossible dates in cursors,
// out-of-range integers and deep nesting: each a 4xx naming its field.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/db.ts';
import { seeded } from '../helpers/faults.ts';
import { ADMIN_TOKEN, createTestApi } from '../helpers/http.ts';

const PER_ROUTE = 520;
const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;

beforeAll(async () => {
  api = createTestApi(t.db);
  // Some state to be left alone.
  await api.admin('POST', '/v1/tasks', { body: { task: 'noop', delay: 3600, idempotencyKey: 'keep' } });
  await api.admin('PUT', '/v1/admin/queues/default', { body: { paused: false } });
  await api.admin('PUT', '/v1/schedules/keep', { body: { task: 'noop', interval: 3600 } });
});

// A dispatch kick left running by one test's enqueues must not claim tasks under the next test's snapshots.
afterEach(() => api.settle());

const snapshot = async () => ({
  tasks: await t.db.query('select * from tasks order by id'),
  schedules: await t.db.query('select * from schedules order by id'),
  tenants: await t.db.query('select * from tenants order by queue, tenant'),
  queues: await t.db.query('select * from queues order by name'),
  keys: await t.db.query('select * from api_keys order by id'),
  secrets: await t.db.query('select * from signing_secrets order by tenant'),
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

/**
 * Random unicode of 1 to 20 characters: ASCII, controls, letters of several
 * scripts, astral characters (surrogate pairs). With `hostile`, one NUL or one
 * lone surrogate (high or low) is inserted between two characters, so it
 * cannot pair up with a neighbour.
 */
function randomUnicode(random: () => number, hostile: boolean): string {
  const pick = <T,>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  const chars: string[] = [];
  const n = 1 + Math.floor(random() * 20);
  for (let i = 0; i < n; i++) {
    const kind = Math.floor(random() * 5);
    const code =
      kind === 0 ? 0x20 + Math.floor(random() * 95)
      : kind === 1 ? 1 + Math.floor(random() * 31)
      : kind === 2 ? pick([0xe9, 0x3b1, 0x416, 0x5d0, 0x627, 0x4e2d, 0xac00, 0xfeff, 0xfffd, 0x202e])
      : kind === 3 ? 0x1f300 + Math.floor(random() * 0x300)
      : 0x10000 + Math.floor(random() * 0xfffff);
    chars.push(String.fromCodePoint(code));
  }
  if (hostile) {
    const bad = pick(['\u0000', String.fromCharCode(0xd800 + Math.floor(random() * 0x400)), String.fromCharCode(0xdc00 + Math.floor(random() * 0x400))]);
    chars.splice(Math.floor(random() * (chars.length + 1)), 0, bad);
  }
  return chars.join('');
}

/** Sets `value` at `path` in a copy of `body`; a path ending in `{key}` adds `value` as a field name instead. */
function place(body: unknown, path: (string | number)[], value: string): { body: unknown; field: string } {
  const copy = structuredClone(body) as Record<string | number, unknown>;
  let node: Record<string | number, unknown> = copy;
  for (const segment of path.slice(0, -1)) node = node[segment] as Record<string | number, unknown>;
  const last = path.at(-1)!;
  if (last === '{key}') {
    node[value] = 'v';
    return { body: copy, field: [...path.slice(0, -1), value].join('.') };
  }
  node[last] = value;
  return { body: copy, field: path.join('.') };
}

const httpTask = { task: 'http', payload: { url: 'https://example.com/hook', method: 'POST', headers: { 'x-a': 'b' }, body: { n: 1 } } };
const scheduleBody = { task: 'noop', cron: '0 9 * * *', timezone: 'Europe/Paris', misfire: 'skip', overlap: 'allow', payload: { note: 'x' }, queue: 'q' };
/** Every string field of every write route, and a field name in each free-form object. */
const STRING_FIELDS: { method: string; path: string; body: unknown; fields: (string | number)[][] }[] = [
  {
    method: 'POST',
    path: '/v1/tasks',
    body: { ...validTask, runAt: '2030-01-01T00:00:00Z', delay: undefined, delivery: 'at_least_once', payload: { note: 'x' } },
    fields: [['task'], ['queue'], ['idempotencyKey'], ['runAt'], ['delivery'], ['payload', 'note'], ['payload', '{key}']],
  },
  {
    method: 'POST',
    path: '/v1/tasks',
    body: httpTask,
    fields: [['payload', 'url'], ['payload', 'method'], ['payload', 'headers', 'x-a'], ['payload', 'headers', '{key}'], ['payload', 'body'], ['payload', 'body', '{key}']],
  },
  { method: 'POST', path: '/v1/tasks/batch', body: { tasks: [{ task: 'noop' }, validTask] }, fields: [['tasks', 1, 'idempotencyKey'], ['tasks', 1, 'task'], ['tasks', 1, 'payload', '{key}']] },
  { method: 'POST', path: '/v1/admin/keys', body: { tenant: 'acme' }, fields: [['tenant']] },
  { method: 'PUT', path: '/v1/admin/tenants/acme', body: { queue: 'default', weight: 2 }, fields: [['queue']] },
  {
    method: 'PUT',
    path: '/v1/schedules/fuzzed',
    body: scheduleBody,
    fields: [['task'], ['cron'], ['timezone'], ['misfire'], ['overlap'], ['queue'], ['payload', 'note'], ['payload', '{key}']],
  },
  {
    method: 'PUT',
    path: '/v1/schedules/fuzzed',
    body: { task: 'noop', recurrence: { every: 1, unit: 'days', start: '2026-01-01T00:00:00Z' } },
    fields: [['recurrence', 'unit'], ['recurrence', 'start']],
  },
  { method: 'PUT', path: '/v1/schedules/fuzzed', body: { task: 'noop', at: '2030-01-01T00:00:00Z' }, fields: [['at']] },
];

const deepJson = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
const cursor = (text: string) => btoa(text).replace(/=+$/, '');

describe('the hostile classes of issue 10: 4xx naming the field, nothing stored', () => {
  it('NUL or a lone surrogate in any string field, or in a field name (seeded random unicode)', async () => {
    const before = await snapshot();
    const random = seeded(10);
    let total = 0;
    for (const route of STRING_FIELDS) {
      for (const field of route.fields) {
        for (let i = 0; i < 12; i++) {
          const placed = place(route.body, field, randomUnicode(random, true));
          const r = await api.admin(route.method, route.path, { body: placed.body });
          const shown = `${route.method} ${route.path} ${JSON.stringify(placed.body).slice(0, 200)}`;
          expect(r.status, shown).toBe(400);
          expect(r.body.error.details[0].path, shown).toBe(placed.field);
          total += 1;
        }
      }
    }
    expect(total).toBeGreaterThanOrEqual(300);
    expect(await snapshot()).toEqual(before);
  }, 120_000);

  it('random unicode without those, in every string field: never a 5xx', async () => {
    const random = seeded(11);
    for (const route of STRING_FIELDS) {
      for (const field of route.fields) {
        for (let i = 0; i < 6; i++) {
          const placed = place(route.body, field, randomUnicode(random, false));
          const r = await api.call(route.method, route.path.replace('acme', 'fuzz-b'), { token: ADMIN_TOKEN, tenant: 'fuzz-unicode', body: placed.body });
          expect(r.status, `${route.method} ${route.path} ${JSON.stringify(placed.body).slice(0, 200)}`).toBeLessThan(500);
        }
      }
    }
  }, 120_000);

  it('NUL and surrogates in path parameters, ids and cursors beyond bigint, impossible dates, deep nesting', async () => {
    const before = await snapshot();
    const cases: { method: string; path: string; raw?: string; body?: unknown; status: number; field: string }[] = [
      { method: 'DELETE', path: '/v1/tasks/by-key/%00', status: 400, field: 'idempotencyKey' },
      { method: 'DELETE', path: '/v1/tasks/by-key/a%00b', status: 400, field: 'idempotencyKey' },
      { method: 'GET', path: '/v1/tasks/9999999999999999999', status: 400, field: 'id' },
      { method: 'DELETE', path: '/v1/tasks/9223372036854775808', status: 400, field: 'id' },
      { method: 'DELETE', path: '/v1/admin/keys/9999999999999999999', status: 400, field: 'id' },
      { method: 'GET', path: `/v1/tasks?cursor=${cursor('id:9999999999999999999')}`, status: 400, field: 'cursor' },
      { method: 'GET', path: `/v1/schedules/keep/runs?cursor=${cursor('at:2026-02-31T00:00:00.000Z')}`, status: 400, field: 'cursor' },
      { method: 'GET', path: `/v1/schedules/keep/runs?cursor=${cursor('at:2026-99-99T99:99:99.999Z')}`, status: 400, field: 'cursor' },
      { method: 'PUT', path: '/v1/schedules/fuzzed', body: { task: 'noop', interval: 3_000_000_000 }, status: 400, field: 'interval' },
      { method: 'POST', path: '/v1/tasks', raw: `{"task":"noop","payload":${deepJson(20_000)}}`, status: 400, field: 'payload.a.a.a.a.a.a.a.…' },
      { method: 'POST', path: '/v1/tasks/batch', raw: `{"tasks":[{"task":"noop","payload":${deepJson(20_000)}}]}`, status: 400, field: 'tasks.0.payload.a.a.a.a.a.…' },
      { method: 'PUT', path: '/v1/schedules/fuzzed', raw: `{"task":"noop","interval":60,"payload":${deepJson(20_000)}}`, status: 400, field: 'payload.a.a.a.a.a.a.a.…' },
      { method: 'POST', path: '/v1/tasks', raw: `{"task":"http","payload":{"url":"https://example.com/","body":${deepJson(2_000)}}}`, status: 400, field: 'payload.body.a.a.a.a.a.a.…' },
      { method: 'POST', path: '/v1/tasks', raw: '{"task":"noop","payload":{"s":"\\ud800"}}', status: 400, field: 'payload.s' },
      { method: 'POST', path: '/v1/tasks', raw: '{"task":"noop","idempotencyKey":"k\\u0000"}', status: 400, field: 'idempotencyKey' },
    ];
    for (const c of cases) {
      const r = await api.admin(c.method, c.path, c.raw !== undefined ? { raw: c.raw } : { body: c.body });
      expect(r.status, `${c.method} ${c.path}`).toBe(c.status);
      expect(r.body.error.details[0].path, `${c.method} ${c.path}`).toBe(c.field);
    }
    expect(await snapshot()).toEqual(before);
    // Within the limits, the same shapes are accepted: an escaped surrogate pair, 100 levels.
    const ok = await api.admin('POST', '/v1/tasks', { raw: `{"task":"noop","delay":60,"payload":{"s":"\\ud83d\\udca5","d":${deepJson(100)}}}` });
    expect(ok.status).toBe(201);
    expect(ok.body.payload.s).toBe('💥');
  }, 120_000);

  it('SQLSTATE classes 22 and 54 from values become 400 and 413, not 500', async () => {
    await expect(t.db.query(`select $1::integer`, ['3000000000'])).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(t.db.query(`select $1::jsonb`, ['{"s":"\\u0000"}'])).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(t.db.query(`select $1::jsonb`, [deepJson(100_000)])).rejects.toMatchObject({ code: 'payload_too_large' });
    // A connection problem or a bug stays what it is.
    await expect(t.db.query(`select * from no_such_table`)).rejects.not.toMatchObject({ code: 'invalid_request' });
  });
});
