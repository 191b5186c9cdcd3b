// Starts the real Worker under `wrangler dev` (workerd, the Worker's own
// bundle, bindings and static assets, local Queues) against a database the
// caller prepared, on a free port, and waits for /healthz. Used by the bench
// (HTTP enqueue) and by the dashboard's browser tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureDashboardBuilt } from './dashboard.ts';
import { freePort } from './postgres.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

export interface WorkerDevOptions {
  databaseUrl: string;
  /** host:port of the WebSocket-to-TCP proxy. */
  wsProxy: string;
  adminToken: string;
  signingSecret: string;
  /** More [vars] or secrets (e.g. ALLOW_PRIVATE_TARGETS). */
  vars?: Record<string, string>;
  /** Serve /__scheduled (fires the cron handler). */
  testScheduled?: boolean;
}

export interface RunningWorkerDev {
  url: string;
  /** wrangler's and workerd's output so far (for a failure message). */
  log(): string;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startWorkerDev(o: WorkerDevOptions): Promise<RunningWorkerDev> {
  await ensureDashboardBuilt();
  const dir = mkdtempSync(join(tmpdir(), 'scheduler-wrangler-'));
  const envFile = join(dir, 'dev.env');
  const vars: Record<string, string> = {
    DATABASE_URL: o.databaseUrl,
    DATABASE_WS_PROXY: o.wsProxy,
    ADMIN_TOKEN: o.adminToken,
    SIGNING_SECRET: o.signingSecret,
    ...o.vars,
  };
  await writeFile(envFile, Object.entries(vars).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join('\n') + '\n', { mode: 0o600 });
  const port = await freePort();
  const logPath = join(dir, 'wrangler.log');
  const logFd = openSync(logPath, 'a');
  const child: ChildProcess = spawn(
    process.execPath,
    [
      join(root, 'node_modules/wrangler/bin/wrangler.js'),
      'dev',
      '--ip', '127.0.0.1',
      '--port', String(port),
      '--env-file', envFile,
      '--persist-to', join(dir, 'state'),
      '--show-interactive-dev-session=false',
      '--log-level', 'warn',
      ...(o.testScheduled ? ['--test-scheduled'] : []),
    ],
    {
      cwd: root,
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_SEND_METRICS: 'false', NO_COLOR: '1' },
    },
  );
  closeSync(logFd);
  const url = `http://127.0.0.1:${port}`;
  const log = () => {
    try {
      return readFileSync(logPath, 'utf8');
    } catch {
      return '';
    }
  };
  // wrangler runs detached (its own process group, for workerd): take it down
  // with this process whatever ends it.
  const onExit = () => {
    try {
      if (child.exitCode === null && child.pid) process.kill(-child.pid, 'SIGTERM');
    } catch {
      /* gone */
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', onExit);
  const stop = async () => {
    process.removeListener('exit', onExit);
    if (child.exitCode === null && child.pid) {
      const exited = new Promise((r) => child.once('exit', r));
      // wrangler runs workerd as a child: signal the whole process group.
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          /* gone */
        }
      }, 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) {
      const text = log();
      await stop();
      throw new Error(`wrangler dev exited with code ${child.exitCode}: ${text.slice(-1000)}`);
    }
    try {
      if ((await fetch(`${url}/healthz`)).status === 200) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      const text = log();
      await stop();
      throw new Error(`wrangler dev: /healthz did not answer within 120 s: ${text.slice(-1000)}`);
    }
    await sleep(250);
  }
  return { url, log, stop };
}
