// Points a copy of the Worker's env at another database, whichever transport
// this project runs over: DATABASE_URL for the Neon path, the HYPERDRIVE
// binding's connection string for the Hyperdrive path.
import { env } from 'cloudflare:workers';
import type { Env } from '../../functions/index.ts';

export function envWithDatabase(url: string, vars: Record<string, string> = {}): Env {
  const base = env as unknown as Env;
  return {
    ...base,
    ...vars,
    DATABASE_URL: url,
    ...(base.HYPERDRIVE ? { HYPERDRIVE: { ...base.HYPERDRIVE, connectionString: url } as Hyperdrive } : {}),
  };
}
