// What Postgres itself says about a run: WAL written (pg_current_wal_lsn
// deltas, server-wide), updates and HOT updates of the hot tables
// (pg_stat_user_tables), and what the system's backends waited on, sampled
// from pg_stat_activity while the run was going.
import pg from 'pg';

export interface TableCounters {
  inserted: number;
  updated: number;
  hotUpdated: number;
  deleted: number;
}

export interface Snapshot {
  lsn: string;
  tables: Record<string, TableCounters>;
}

/**
 * Reads counters of `tables` (schema-qualified) in the database `url` names.
 * Backends flush their counters when they exit, so read after closing the
 * system's connections.
 */
export async function snapshot(url: string, tables: readonly string[]): Promise<Snapshot> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const lsn = (await c.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0]!.lsn;
    const rows = (
      await c.query<{ name: string; ins: string; upd: string; hot: string; del: string }>(
        `select schemaname || '.' || relname as name, n_tup_ins as ins, n_tup_upd as upd, n_tup_hot_upd as hot, n_tup_del as del
         from pg_stat_user_tables where schemaname || '.' || relname = any($1::text[])`,
        [tables],
      )
    ).rows;
    const out: Record<string, TableCounters> = {};
    for (const r of rows) out[r.name] = { inserted: Number(r.ins), updated: Number(r.upd), hotUpdated: Number(r.hot), deleted: Number(r.del) };
    return { lsn, tables: out };
  } finally {
    await c.end();
  }
}

export interface Delta {
  walBytes: number;
  tables: Record<string, TableCounters & { hotRatio: number }>;
}

export async function delta(url: string, before: Snapshot, after: Snapshot): Promise<Delta> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  let walBytes: number;
  try {
    walBytes = Number(
      (await c.query<{ d: string }>('select pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text as d', [after.lsn, before.lsn])).rows[0]!.d,
    );
  } finally {
    await c.end();
  }
  const tables: Delta['tables'] = {};
  for (const [name, a] of Object.entries(after.tables)) {
    const b = before.tables[name] ?? { inserted: 0, updated: 0, hotUpdated: 0, deleted: 0 };
    const updated = a.updated - b.updated;
    const hotUpdated = a.hotUpdated - b.hotUpdated;
    tables[name] = {
      inserted: a.inserted - b.inserted,
      updated,
      hotUpdated,
      deleted: a.deleted - b.deleted,
      hotRatio: updated > 0 ? hotUpdated / updated : NaN,
    };
  }
  return { walBytes, tables };
}

export interface WaitSampler {
  /** Stops sampling; returns how often each wait was seen, and the number of samples. */
  stop(): Promise<{ samples: number; busy: number; waits: Record<string, number> }>;
}

/** Samples the non-idle backends of database `datname` every `intervalMs`. */
export async function sampleWaits(serverUrl: string, datname: string, intervalMs = 20): Promise<WaitSampler> {
  const c = new pg.Client({ connectionString: serverUrl });
  await c.connect();
  const waits: Record<string, number> = {};
  let samples = 0;
  let busy = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const rows = (
        await c.query<{ w: string | null }>(
          `select coalesce(wait_event_type || ':' || wait_event, 'CPU') as w from pg_stat_activity
           where datname = $1 and state = 'active' and pid <> pg_backend_pid()`,
          [datname],
        )
      ).rows;
      samples += 1;
      for (const r of rows) {
        busy += 1;
        waits[r.w ?? 'CPU'] = (waits[r.w ?? 'CPU'] ?? 0) + 1;
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop.catch(() => {});
      await c.end();
      return { samples, busy, waits };
    },
  };
}
