// The one seam between the core and Postgres.
//
// Everything in src/ talks to the database through `Db`: a query, and a
// transaction helper that hands the callback a connection of its own. Two
// transports implement it over one set of SQL (pooled.ts holds what they
// share): pg.ts over Hyperdrive, neon.ts over WebSockets; functions/deps.ts
// picks one from the bindings. A counting wrapper (below) lets tests and
// benchmarks see how many statements, round trips and connections a step costs.

/** A named statement: the name is what logs and counters show. */
export interface Sql {
  readonly name: string;
  readonly text: string;
}

export interface Queryable {
  /** One statement, one round trip. `values` are bound, never interpolated. */
  query<R extends object = Record<string, unknown>>(sql: Sql | string, values?: readonly unknown[]): Promise<R[]>;
}

export interface Db extends Queryable {
  /** Runs `fn` inside BEGIN/COMMIT on one connection; ROLLBACK if it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** Closes every connection; the Db is unusable afterwards. */
  close(): Promise<void>;
  /** Which transport carries the statements (adapters set it). */
  readonly transport?: 'hyperdrive' | 'neon';
  /** Physical connections opened so far: each costs set-up round trips of its own. */
  connections?(): number;
}

/** Declares a named statement. Names are snake_case, noun then verb then qualifier. */
export function sql(name: string, text: string): Sql {
  return { name, text };
}

export interface StatementCounts {
  /** Round trips to the server, BEGIN and COMMIT included. */
  roundTrips: number;
  /** Statements by name (unnamed text counts under its first words). */
  byName: Record<string, number>;
  /**
   * Connections opened (counted by the adapter). Each costs the transport's
   * set-up round trips: the Postgres start-up and auth exchange, plus the
   * WebSocket upgrade on the Neon path. Behind Hyperdrive or a session pooler
   * that exchange stays near the Worker and no backend is started.
   */
  readonly connects: number;
}

/**
 * Wraps a Db so every statement is counted by name. Used by tests that assert
 * "one statement per batch" and by the benchmark's statements-per-task figure.
 */
export function countStatements(db: Db): { db: Db; counts: StatementCounts; reset(): void } {
  let connectsBefore = db.connections?.() ?? 0;
  const counts: StatementCounts = {
    roundTrips: 0,
    byName: {},
    get connects() {
      return (db.connections?.() ?? 0) - connectsBefore;
    },
  };
  const note = (s: Sql | string) => {
    const name = typeof s === 'string' ? s.trim().split(/\s+/).slice(0, 2).join(' ').toLowerCase() : s.name;
    counts.roundTrips += 1;
    counts.byName[name] = (counts.byName[name] ?? 0) + 1;
  };
  const wrap = (q: Queryable): Queryable => ({
    query: (s, values) => {
      note(s);
      return q.query(s, values);
    },
  });
  const wrapped: Db = {
    ...wrap(db),
    transaction: (fn) =>
      db.transaction((tx) => {
        counts.roundTrips += 2; // BEGIN and COMMIT
        return fn(wrap(tx));
      }),
    close: () => db.close(),
    transport: db.transport,
    connections: () => db.connections?.() ?? 0,
  };
  return {
    db: wrapped,
    counts,
    reset() {
      counts.roundTrips = 0;
      counts.byName = {};
      connectsBefore = db.connections?.() ?? 0;
    },
  };
}
