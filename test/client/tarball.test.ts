// The client as users get it: `npm pack` of packages/client, installed offline
// into a scratch project outside the repository, then used from Node and from
// a Worker of that project (workerd, bundled by wrangler from the scratch
// project's node_modules) against the service running in `wrangler dev`.
// One flow, written as a user would, runs in both: enqueue, get, cancel, a
// 404 as ApiError, and a webhook signed and verified through the /webhooks
// entry point.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../../scripts/postgres.ts';
import { useTestDatabase } from '../helpers/db.ts';
import { startWranglerDev, type WranglerDev } from '../../scripts/worker-dev.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const packageDir = join(root, 'packages/client');

// What a user writes, shared by the Node script and the Worker.
const FLOW = `
import { ApiError, createClient } from 'edge-scheduler-client';
import { signWebhook, verifyWebhook, WebhookVerificationError } from 'edge-scheduler-client/webhooks';

export async function flow({ baseUrl, key, runtime }) {
  const scheduler = createClient({ baseUrl, key });
  const created = await scheduler.tasks.enqueue({ task: 'noop', delay: 3600, payload: { runtime } });
  const got = await scheduler.tasks.get(created.id);
  const cancelled = await scheduler.tasks.cancel(created.id);
  const missing = await scheduler.tasks.get('999999999').then(
    () => 'found',
    (e) => (e instanceof ApiError ? { status: e.status, code: e.code } : String(e)),
  );
  const secret = 'whsec_' + btoa('a-receiver-secret-of-32-bytes!!!');
  const body = JSON.stringify({ order: 42 });
  const headers = await signWebhook({ secret, id: created.id, timestamp: new Date(), body });
  await verifyWebhook({ secret, headers, body });
  const forged = await verifyWebhook({ secret, headers, body: body + ' ' }).then(
    () => 'accepted',
    (e) => (e instanceof WebhookVerificationError ? 'refused' : String(e)),
  );
  return {
    id: created.id,
    statuses: [created.status, got.status, cancelled.status],
    payload: got.payload,
    missing,
    webhook: { genuine: 'verified', forged },
  };
}
`;

const NODE_SCRIPT = `
import { flow } from './flow.mjs';
const result = await flow({ baseUrl: process.env.SERVICE_URL, key: process.env.SERVICE_KEY, runtime: 'node' });
process.stdout.write(JSON.stringify(result));
`;

const WORKER = `
import { flow } from './flow.mjs';
export default {
  async fetch(request, env) {
    if (new URL(request.url).pathname === '/ready') return new Response('ok');
    try {
      const key = request.headers.get('x-service-key');
      return Response.json(await flow({ baseUrl: env.SERVICE_URL, key, runtime: 'workerd' }));
    } catch (e) {
      return new Response(String(e?.stack ?? e), { status: 500 });
    }
  },
};
`;

// Strict TypeScript in the user's project: the shipped declarations resolve
// without zod or the server, and they are real types, not any.
const TYPES_CHECK = `
import { createClient, type Task, type TaskInput } from 'edge-scheduler-client';
import { verifyWebhook } from 'edge-scheduler-client/webhooks';
const scheduler = createClient({ baseUrl: 'https://scheduler.example', key: 'k' });
export const input: TaskInput = { task: 'noop', delay: 60, delivery: 'at_most_once' };
export async function status(id: string): Promise<Task['status']> {
  return (await scheduler.tasks.get(id)).status;
}
export const verify: typeof verifyWebhook = verifyWebhook;
// @ts-expect-error a misspelt field of the request body
export const misspelt: TaskInput = { task: 'noop', dealy: 60 };
// @ts-expect-error a status that does not exist
export const unknownStatus: Task['status'] = 'done';
`;

const TSCONFIG = JSON.stringify({
  compilerOptions: {
    strict: true,
    noEmit: true,
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    lib: ['ES2023', 'DOM'],
    types: [],
    skipLibCheck: false,
  },
  files: ['types-check.ts'],
});

const db = useTestDatabase();
let scratch: string;
let service: WranglerDev | undefined;
let userWorker: WranglerDev | undefined;
let tenantKey: string;
/** The user project's type check, started as soon as it is installed (it takes seconds). */
let typeCheck: Promise<string>;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'scheduler-client-scratch-'));
  const packed = await run('npm', ['pack', '--silent', '--pack-destination', scratch], { cwd: packageDir });
  const tarball = join(scratch, packed.stdout.trim().split('\n').pop()!);

  const project = join(scratch, 'app');
  for (const dir of ['service', 'worker', 'app']) await mkdir(join(scratch, dir));
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'scratch-app', private: true, type: 'module' }));
  // Offline: a tarball that needed anything from a registry would fail here.
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], { cwd: project });
  await writeFile(join(project, 'flow.mjs'), FLOW);
  await writeFile(join(project, 'node-check.mjs'), NODE_SCRIPT);
  await writeFile(join(project, 'worker.mjs'), WORKER);
  await writeFile(join(project, 'types-check.ts'), TYPES_CHECK);
  await writeFile(join(project, 'tsconfig.json'), TSCONFIG);
  typeCheck = run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: project }).then(
    () => 'ok',
    (e: { stdout?: string }) => e.stdout || String(e),
  );
  await writeFile(
    join(project, 'wrangler.toml'),
    'name = "scratch-app"\nmain = "worker.mjs"\ncompatibility_date = "2026-11-01"\n',
  );

  const adminToken = `adm_${randomBytes(24).toString('base64url')}`;
  const serviceUrl = `http://127.0.0.1:${await freePort()}`;
  const started = await Promise.allSettled([
    startWranglerDev({
      cwd: root,
      dir: join(scratch, 'service'),
      port: Number(new URL(serviceUrl).port),
      readyPath: '/healthz',
      timeoutMs: 60_000,
      vars: {
        DATABASE_URL: db.url,
        DATABASE_WS_PROXY: inject('wsProxy'),
        ADMIN_TOKEN: adminToken,
        SIGNING_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
      },
    }),
    startWranglerDev({ cwd: project, dir: join(scratch, 'worker'), readyPath: '/ready', timeoutMs: 60_000, vars: { SERVICE_URL: serviceUrl } }),
  ]);
  [service, userWorker] = started.map((s) => (s.status === 'fulfilled' ? s.value : undefined));
  for (const s of started) if (s.status === 'rejected') throw s.reason;
  const res = await fetch(`${serviceUrl}/v1/admin/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tenant: 'scratch-app' }),
  });
  expect(res.status).toBe(201);
  tenantKey = ((await res.json()) as { key: string }).key;
}, 120_000);

afterAll(async () => {
  await Promise.all([service?.stop(), userWorker?.stop()]);
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function storedTask(id: string) {
  return (await db.db.query<{ tenant: string; status: string; payload: unknown }>(
    `select tenant, status, payload from tasks where id = $1::bigint`,
    [id],
  ))[0];
}

const expected = (runtime: string) => ({
  statuses: ['scheduled', 'scheduled', 'cancelled'],
  payload: { runtime },
  missing: { status: 404, code: 'not_found' },
  webhook: { genuine: 'verified', forged: 'refused' },
});

describe('the client tarball, installed offline into a project outside the repository', () => {
  it('installs nothing but itself: no dependencies, only dist/, package.json and the README', async () => {
    const project = join(scratch, 'app');
    expect(await readdir(join(project, 'node_modules'))).toEqual(['.package-lock.json', 'edge-scheduler-client']);
    const pkg = JSON.parse(await readFile(join(project, 'node_modules/edge-scheduler-client/package.json'), 'utf8'));
    expect(pkg.dependencies ?? {}).toEqual({});
    expect((await readdir(join(project, 'node_modules/edge-scheduler-client'))).sort()).toEqual(['README.md', 'dist', 'package.json']);
  });

  it('from Node: enqueue, get and cancel a task against the running service; verify a webhook', async () => {
    const { stdout } = await run(process.execPath, ['node-check.mjs'], {
      cwd: join(scratch, 'app'),
      env: { ...process.env, SERVICE_URL: service!.url, SERVICE_KEY: tenantKey },
    });
    const result = JSON.parse(stdout);
    expect(result).toMatchObject(expected('node'));
    expect(await storedTask(result.id)).toEqual({ tenant: 'scratch-app', status: 'cancelled', payload: { runtime: 'node' } });
  });

  it('from a Worker in workerd: enqueue, get and cancel a task against the running service; verify a webhook', async () => {
    const res = await fetch(`${userWorker!.url}/`, { headers: { 'x-service-key': tenantKey } });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    const result = JSON.parse(text);
    expect(result).toMatchObject(expected('workerd'));
    expect(await storedTask(result.id)).toEqual({ tenant: 'scratch-app', status: 'cancelled', payload: { runtime: 'workerd' } });
  });

  it('type-checks strictly in the user project, with real types and no zod', async () => {
    expect(await typeCheck).toBe('ok');
  });
});
