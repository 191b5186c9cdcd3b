// `wrangler dev` as a child process, for tests that need a Worker behind a
// real port: the service itself, or a user's Worker built from another
// directory. wrangler runs workerd as a child of its own, so it gets its own
// process group and is stopped as a group, whatever ends the test run.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../scripts/postgres.ts';

const wranglerBin = fileURLToPath(new URL('../../node_modules/wrangler/bin/wrangler.js', import.meta.url));

export interface WranglerDev {
  url: string;
  stop(): Promise<void>;
}

export async function startWranglerDev(options: {
  /** Where wrangler.toml is. */
  cwd: string;
  /** A directory of the caller's for state, the vars file and the log. */
  dir: string;
  vars: Record<string, string>;
  /** Polled until it answers 200. */
  readyPath: string;
  port?: number;
  timeoutMs?: number;
}): Promise<WranglerDev> {
  const envFile = join(options.dir, 'dev.env');
  await writeFile(envFile, Object.entries(options.vars).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join('\n') + '\n', { mode: 0o600 });
  const port = options.port ?? (await freePort());
  const logFile = join(options.dir, 'wrangler.log');
  const logFd = openSync(logFile, 'a');
  const child = spawn(
    process.execPath,
    [
      wranglerBin,
      'dev',
      '--ip', '127.0.0.1',
      '--port', String(port),
      '--inspector-port', String(await freePort()),
      '--env-file', envFile,
      '--persist-to', join(options.dir, 'state'),
      '--show-interactive-dev-session=false',
      '--log-level', 'warn',
    ],
    {
      cwd: options.cwd,
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_SEND_METRICS: 'false', NO_COLOR: '1' },
    },
  );
  closeSync(logFd);
  const kill = (signal: NodeJS.Signals) => {
    try {
      if (child.exitCode === null && child.pid) process.kill(-child.pid, signal);
    } catch {
      /* gone */
    }
  };
  const onExit = () => kill('SIGKILL');
  process.once('exit', onExit);
  const stop = async () => {
    process.removeListener('exit', onExit);
    if (child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    kill('SIGTERM');
    const timer = setTimeout(() => kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };

  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    // A build error leaves wrangler running, waiting for an edit: fail at once.
    const log = (await readFile(logFile, 'utf8').catch(() => '')).replace(/\x1b\[[0-9;]*m/g, '');
    const failure =
      child.exitCode !== null
        ? `exited with code ${child.exitCode}`
        : /✘ \[ERROR\]/.test(log)
          ? 'reported an error'
          : Date.now() > deadline
            ? `${options.readyPath} did not answer 200 in time`
            : null;
    if (failure) {
      await stop();
      throw new Error(`wrangler dev in ${options.cwd}: ${failure}\n${log.slice(-2000)}`);
    }
    try {
      // wrangler holds requests while its build is broken: ask again later.
      if ((await fetch(`${url}${options.readyPath}`, { signal: AbortSignal.timeout(2000) })).status === 200) break;
    } catch {
      /* not listening or not ready yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, stop };
}
