// `wrangler dev` as a child process, the one launcher for everything that
// needs a Worker behind a real port: the service itself (the dashboard's
// browser tests, the bench's HTTP and transport figures) or a user's Worker
// built from another directory (the client tarball test). wrangler runs
// workerd as a child of its own, so it gets its own process group and is
// stopped as a group, whatever ends the caller.
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureDashboardBuilt } from './dashboard.ts';
import { freePort } from './postgres.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const wranglerBin = join(root, 'node_modules/wrangler/bin/wrangler.js');

/**
 * The repository's wrangler.toml plus a HYPERDRIVE binding, for wrangler dev
 * only (pass it as `config`). Its paths (main, the assets directory) are made
 * absolute, since the file is written elsewhere. The binding's local
 * connection string comes from the environment
 * (CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE), so no database
 * address is written into a config file.
 */
export async function hyperdriveConfig(id: string): Promise<string> {
  const base = await readFile(join(root, 'wrangler.toml'), 'utf8');
  const local = base
    .replace(/^main = "([^"]+)"/m, (_, main: string) => `main = ${JSON.stringify(join(root, main))}`)
    .replace(/^directory = "\.\/([^"]+)"/m, (_, dir: string) => `directory = ${JSON.stringify(join(root, dir))}`);
  return `${local}\n[[hyperdrive]]\nbinding = "HYPERDRIVE"\nid = ${JSON.stringify(id)}\n`;
}

export interface WranglerDevOptions {
  /** Where wrangler.toml is (default: this repository). */
  cwd?: string;
  /** A directory of the caller's for state, the vars file and the log (default: a temporary one, removed at stop). */
  dir?: string;
  /** The Worker's vars and secrets, passed as an env file (mode 0600). */
  vars: Record<string, string>;
  /** Polled until it answers 200 (default /healthz). */
  readyPath?: string;
  port?: number;
  /** How long to wait for readyPath (default 120 s). */
  timeoutMs?: number;
  /** A wrangler.toml to use instead of the one in cwd (written to the directory, passed as --config). */
  config?: string;
  /** More `wrangler dev` arguments (e.g. --test-scheduled). */
  args?: readonly string[];
  /** More environment for wrangler (e.g. Hyperdrive's local connection string). */
  env?: Record<string, string>;
}

export interface WranglerDev {
  url: string;
  /** wrangler's inspector (Chrome DevTools protocol) for the Worker: the bench's CPU profiles. */
  inspectorPort: number;
  /** Its directory (state, log, and with `config`, the .wrangler build output). */
  dir: string;
  /** wrangler's process (workerd runs as its descendant): the bench's CPU figures. */
  pid: number | undefined;
  /** wrangler's and workerd's output so far (for a failure message). */
  log(): string;
  stop(): Promise<void>;
}

export async function startWranglerDev(options: WranglerDevOptions): Promise<WranglerDev> {
  const cwd = options.cwd ?? root;
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'scheduler-wrangler-'));
  const removeDir = () => {
    if (ownDir) rmSync(dir, { recursive: true, force: true });
  };
  const envFile = join(dir, 'dev.env');
  await writeFile(envFile, Object.entries(options.vars).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join('\n') + '\n', { mode: 0o600 });
  const configArgs: string[] = [];
  if (options.config !== undefined) {
    const file = join(dir, 'wrangler.toml');
    await writeFile(file, options.config);
    configArgs.push('--config', file);
  }
  const port = options.port ?? (await freePort());
  const inspectorPort = await freePort();
  const logFile = join(dir, 'wrangler.log');
  const logFd = openSync(logFile, 'a');
  const child = spawn(
    process.execPath,
    [
      wranglerBin,
      'dev',
      ...configArgs,
      '--ip', '127.0.0.1',
      '--port', String(port),
      '--inspector-port', String(inspectorPort),
      '--env-file', envFile,
      '--persist-to', join(dir, 'state'),
      '--show-interactive-dev-session=false',
      '--log-level', 'warn',
      ...(options.args ?? []),
    ],
    {
      cwd,
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_SEND_METRICS: 'false', NO_COLOR: '1', ...options.env },
    },
  );
  closeSync(logFd);
  const log = () => {
    try {
      return readFileSync(logFile, 'utf8').replace(/\x1b\[[0-9;]*m/g, '');
    } catch {
      return '';
    }
  };
  const kill = (signal: NodeJS.Signals) => {
    try {
      if (child.exitCode === null && child.pid) process.kill(-child.pid, signal);
    } catch {
      /* gone */
    }
  };
  const onExit = () => {
    kill('SIGTERM');
    removeDir();
  };
  process.once('exit', onExit);
  const stop = async () => {
    process.removeListener('exit', onExit);
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      kill('SIGTERM');
      const timer = setTimeout(() => kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    removeDir();
  };

  const url = `http://127.0.0.1:${port}`;
  const readyPath = options.readyPath ?? '/healthz';
  const deadline = Date.now() + (options.timeoutMs ?? 120_000);
  for (;;) {
    // A build error leaves wrangler running, waiting for an edit: fail at once.
    const text = log();
    const failure =
      child.exitCode !== null
        ? `exited with code ${child.exitCode}`
        : /✘ \[ERROR\]/.test(text)
          ? 'reported an error'
          : Date.now() > deadline
            ? `${readyPath} did not answer 200 in time`
            : null;
    if (failure) {
      await stop();
      throw new Error(`wrangler dev in ${cwd}: ${failure}\n${text.slice(-2000)}`);
    }
    try {
      // wrangler holds requests while its build is broken: ask again later.
      if ((await fetch(`${url}${readyPath}`, { signal: AbortSignal.timeout(2000) })).status === 200) break;
    } catch {
      /* not listening or not ready yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, inspectorPort, dir, pid: child.pid, log, stop };
}

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

export type RunningWorkerDev = WranglerDev;

/** The service's own Worker (its bundle, bindings and the dashboard's assets) against a database the caller prepared. */
export async function startWorkerDev(o: WorkerDevOptions): Promise<RunningWorkerDev> {
  await ensureDashboardBuilt();
  return startWranglerDev({
    vars: {
      DATABASE_URL: o.databaseUrl,
      DATABASE_WS_PROXY: o.wsProxy,
      ADMIN_TOKEN: o.adminToken,
      SIGNING_SECRET: o.signingSecret,
      ...o.vars,
    },
    args: o.testScheduled ? ['--test-scheduled'] : [],
  });
}
