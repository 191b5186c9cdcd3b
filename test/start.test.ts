// `npm start` as the README's quick start runs it: its own embedded Postgres
// (in a scratch DATA_DIR, so a developer's .data/ is never touched), the
// migrations, the proxy, wrangler dev and the ticker, on free ports. A task
// due now succeeds through the real local Queue; SIGTERM stops everything,
// Postgres included. Its output is kept and shown only when the test fails.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../scripts/postgres.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const ADMIN_TOKEN = 'npm-start-test-admin-token-of-32-characters-at-least';

let child: ChildProcess | undefined;
let dir: string | undefined;
let output = '';

/** The group of npm and the script it execs; wrangler is its own group, stopped by the script. */
const signal = (s: NodeJS.Signals) => {
  try {
    if (child?.pid && child.exitCode === null && child.signalCode === null) process.kill(-child.pid, s);
  } catch {
    /* gone */
  }
};

afterAll(async () => {
  signal('SIGKILL'); // only if the test failed before stopping it
  if (dir) await rm(dir, { recursive: true, force: true }).catch(() => {});
});

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child!.exitCode !== null) throw new Error(`npm start exited (${child!.exitCode}) while waiting for ${what}\n${output.slice(-3000)}`);
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`npm start: no ${what} within ${timeoutMs / 1000} s\n${output.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe('npm start', () => {
  it('serves /healthz, runs a task due now to success, and stops cleanly on SIGTERM', { timeout: 240_000 }, async () => {
    dir = await mkdtemp(join(tmpdir(), 'npm-start-'));
    const port = await freePort();
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), DATA_DIR: dir, ADMIN_TOKEN, TICK_SECONDS: '1', NO_COLOR: '1' };
    delete env.DATABASE_URL; // its own embedded Postgres
    delete env.SIGNING_SECRET;
    child = spawn('npm', ['start', '--silent'], { cwd: root, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d) => (output += String(d)));
    child.stderr!.on('data', (d) => (output += String(d)));
    const exited = new Promise<number | string | null>((resolve) => child!.once('exit', (code, sig) => resolve(code ?? sig)));
    const url = `http://127.0.0.1:${port}`;

    const health = await until(
      '/healthz',
      async () => {
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
        return res.status === 200 ? ((await res.json()) as { ok: boolean; transport: string }) : undefined;
      },
      180_000,
    );
    expect(health).toMatchObject({ ok: true, transport: 'hyperdrive' });
    await until('the ready line', async () => (output.includes(`[start] ready: ${url}`) ? true : undefined), 10_000);

    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', 'x-tenant': 'quickstart' };
    const created = await fetch(`${url}/v1/tasks`, { method: 'POST', headers, body: JSON.stringify({ task: 'noop' }) });
    expect(created.status, output.slice(-3000)).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const done = await until(
      'a succeeded task',
      async () => {
        const task = (await (await fetch(`${url}/v1/tasks/${id}`, { headers })).json()) as { status: string; attempts: number };
        return task.status === 'succeeded' ? task : undefined;
      },
      60_000,
    );
    expect(done).toMatchObject({ status: 'succeeded', attempts: 1 });

    signal('SIGTERM');
    const killer = setTimeout(() => signal('SIGKILL'), 30_000);
    const code = await exited;
    clearTimeout(killer);
    // The script exits 0; npm, signalled with its group as a terminal's Ctrl-C
    // would, sometimes reports the SIGTERM it received itself under load: as
    // 128 + 15, or by ending on the signal once its script has (exit code
    // null, seen in one run of two here). Not SIGKILL: that is the 30 s
    // killer above. The clean stop is what the lines below prove.
    expect([0, 143, 'SIGTERM'], output.slice(-3000)).toContain(code);
    // npm exiting on the signal does not wait for its script, which may still
    // be stopping Postgres (seen once, 143 and no line yet): its own line says when.
    for (const deadline = Date.now() + 30_000; !output.includes('[start] postgres stopped') && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(output).toContain('[start] postgres stopped');
    // Nothing is left listening.
    await expect(fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) })).rejects.toThrow();
  });
});
