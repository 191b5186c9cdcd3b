// `npm start`: the whole service on this machine.
//   embedded Postgres (data under .data/, kept across restarts) unless
//   DATABASE_URL is set -> migrations -> the WebSocket proxy -> wrangler dev
//   -> the dashboard's build (when its sources are newer) -> a ticker firing the cron handler every few seconds.
// The Worker reaches Postgres the way production should: `pg` through a
// HYPERDRIVE binding, here in Hyperdrive's local mode (workerd opens a TCP
// socket to the database). DATABASE_TRANSPORT=neon runs the Neon driver over
// the WebSocket proxy instead, as a deployment without Hyperdrive does.
// Prints the URL and the admin token once /healthz answers; Ctrl-C (SIGINT or
// SIGTERM) stops every child and Postgres.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadMigrations } from './migrations.ts';
import { openNodeDb } from './node-db.ts';
import { startEmbeddedPostgres, stopPostgresOnSignalsYourself, type RunningPostgres } from './postgres.ts';
import { hyperdriveConfig } from './worker-dev.ts';
import { startWsProxy, type WsProxy } from './ws-proxy.ts';
import { migrate } from '../src/db/migrate.ts';
import { buildDashboardIfStale } from './dashboard.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
// DATA_DIR: another place for all of it (Postgres, secrets, wrangler's state), e.g. a test's scratch directory.
const dataDir = process.env.DATA_DIR ? resolve(process.env.DATA_DIR) : `${root}.data`;
const say = (line: string) => console.log(`[start] ${line}`);

const port = Number(process.env.PORT ?? 8787);
const tickSeconds = Number(process.env.TICK_SECONDS ?? 5);
const allowPrivate = process.env.ALLOW_PRIVATE_TARGETS ?? 'true';
const transport = process.env.DATABASE_TRANSPORT === 'neon' ? 'neon' : 'hyperdrive';

/** Hyperdrive's local mode needs a password in the string, even under trust auth. */
function withPassword(url: string): string {
  const u = new URL(url);
  if (!u.password) u.password = 'unused';
  return u.toString();
}

/** wrangler.toml plus a HYPERDRIVE binding (scripts/worker-dev.ts), written to the data directory for wrangler dev. */
async function writeHyperdriveConfig(): Promise<string> {
  const file = `${dataDir}/wrangler.local.toml`;
  await writeFile(file, await hyperdriveConfig('local'));
  return file;
}

interface LocalSecrets {
  adminToken: string;
  signingSecret: string;
}

/** Generated once and kept under .data/, so tokens survive a restart. */
async function localSecrets(): Promise<LocalSecrets> {
  const file = `${dataDir}/secrets.json`;
  let saved: Partial<LocalSecrets> = {};
  if (existsSync(file)) saved = JSON.parse(await readFile(file, 'utf8')) as Partial<LocalSecrets>;
  const secrets: LocalSecrets = {
    adminToken: saved.adminToken ?? `adm_${randomBytes(24).toString('base64url')}`,
    signingSecret: saved.signingSecret ?? `whsec_${randomBytes(32).toString('base64')}`,
  };
  await writeFile(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}

async function waitForHealth(url: string, child: ChildProcess, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`wrangler dev exited with code ${child.exitCode}`);
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${url}/healthz did not answer 200 within ${timeoutMs / 1000} s`);
}

async function main(): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  await chmod(dataDir, 0o755);
  const secrets = await localSecrets();
  const adminToken = process.env.ADMIN_TOKEN || secrets.adminToken;
  const signingSecret = process.env.SIGNING_SECRET || secrets.signingSecret;
  // The generated token is 36 characters; the Worker ignores one under 32 (admin access disabled).
  if (adminToken.length < 32) say('warning: ADMIN_TOKEN is shorter than 32 characters: the Worker disables admin access');
  if (signingSecret.length < 32) say('warning: SIGNING_SECRET is shorter than 32 characters: the Worker refuses to start');

  let pg: RunningPostgres | undefined;
  let proxy: WsProxy | undefined;
  let wrangler: ChildProcess | undefined;
  let ticker: ReturnType<typeof setInterval> | undefined;
  let stopping = false;

  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say('stopping...');
    if (ticker) clearInterval(ticker);
    // Still running: a process a signal ended has no exit code, and its 'exit' has been emitted already.
    if (wrangler && wrangler.exitCode === null && wrangler.signalCode === null && wrangler.pid) {
      const exited = new Promise((r) => wrangler!.once('exit', r));
      // wrangler runs workerd as a child: signal the whole process group.
      try {
        process.kill(-wrangler.pid, 'SIGTERM');
      } catch {
        /* already gone */
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-wrangler!.pid!, 'SIGKILL');
        } catch {
          /* gone */
        }
      }, 5000);
      await exited;
      clearTimeout(timer);
    }
    // Bounded: nothing the proxy still holds may keep Postgres from stopping.
    if (proxy) await Promise.race([proxy.close(), new Promise((r) => setTimeout(r, 3000))]);
    if (pg) {
      await pg.stop();
      say('postgres stopped');
    }
    process.exit(code);
  };
  stopPostgresOnSignalsYourself();
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
  process.on('SIGHUP', () => void stop(0));
  // If whoever started us (npm, a shell, a supervisor) dies without passing a
  // signal on, do not linger as an orphan holding Postgres and the port.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) void stop(0);
  }, 1000).unref();

  try {
    let databaseUrl = process.env.DATABASE_URL;
    if (!databaseUrl) {
      say(`starting embedded Postgres (data in .data/postgres)`);
      pg = await startEmbeddedPostgres({ dir: `${dataDir}/postgres`, persistent: true });
      const admin = await openNodeDb(pg.url, { maxConnections: 1 });
      const exists = await admin.query(`select 1 from pg_database where datname = 'scheduler'`);
      if (exists.length === 0) await admin.query('create database scheduler');
      await admin.close();
      databaseUrl = pg.url.replace(/\/postgres$/, '/scheduler');
    }

    proxy = await startWsProxy();
    const db = await openNodeDb(databaseUrl, { wsProxy: proxy.address, maxConnections: 1 });
    const result = await migrate(db, await loadMigrations());
    await db.close();
    say(`migrations: ${result.applied.length} applied, ${result.skipped.length} already applied`);

    const envFile = `${dataDir}/dev.env`;
    const vars: Record<string, string> = {
      DATABASE_URL: databaseUrl,
      DATABASE_WS_PROXY: proxy.address,
      ADMIN_TOKEN: adminToken,
      SIGNING_SECRET: signingSecret,
      ALLOW_PRIVATE_TARGETS: allowPrivate,
    };
    await writeFile(envFile, Object.entries(vars).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join('\n') + '\n', { mode: 0o600 });

    if (await buildDashboardIfStale()) say('dashboard built');

    const url = `http://127.0.0.1:${port}`;
    const configArgs = transport === 'hyperdrive' ? ['--config', await writeHyperdriveConfig()] : [];
    say(`starting wrangler dev on ${url} (database transport: ${transport})`);
    wrangler = spawn(
      process.execPath,
      [
        `${root}node_modules/wrangler/bin/wrangler.js`,
        'dev',
        ...configArgs,
        '--ip', '127.0.0.1',
        '--port', String(port),
        '--test-scheduled',
        '--env-file', envFile,
        '--persist-to', `${dataDir}/wrangler`,
        '--show-interactive-dev-session=false',
      ],
      {
        cwd: root,
        detached: true,
        stdio: ['ignore', 'inherit', 'inherit'],
        env: {
          ...process.env,
          WRANGLER_SEND_METRICS: 'false',
          CLOUDFLARE_SEND_METRICS: 'false',
          ...(transport === 'hyperdrive' ? { CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE: withPassword(databaseUrl) } : {}),
        },
      },
    );
    wrangler.on('exit', (code) => {
      if (!stopping) {
        say(`wrangler dev exited (${code}); shutting down`);
        void stop(code ?? 1);
      }
    });

    await waitForHealth(url, wrangler);
    ticker = setInterval(() => {
      fetch(`${url}/__scheduled?cron=${encodeURIComponent('* * * * *')}`).catch(() => {});
    }, tickSeconds * 1000);

    console.log('');
    say(`ready: ${url}`);
    say(`admin token: ${adminToken}`);
    say(`dashboard: ${url}/dashboard/ (sign in with the admin token or a tenant key)`);
    say(`sweeping every ${tickSeconds} s; Ctrl-C stops everything`);
    say(`try: curl -s ${url}/v1/tasks -H "authorization: Bearer ${adminToken}" -H 'content-type: application/json' -d '{"task":"noop"}'`);
  } catch (error) {
    console.error('[start] failed:', error instanceof Error ? error.message : error);
    await stop(1);
  }
}

await main();
