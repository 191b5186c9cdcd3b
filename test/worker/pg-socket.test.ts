// `pg` over workerd's TCP socket (src/db/pg.ts): the messages of one
// statement leave in one socket write, through the real pg and the real
// socket, and nothing about a statement's errors or the connection's end
// changes with it. Runs in both workerd projects: over the HYPERDRIVE
// binding where there is one, straight to Postgres where there is not.
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { createPgDb, type PgDb } from '../../src/db/pg.ts';
import { sql } from '../../src/db/seam.ts';

const withPassword = (url: string) => {
  const u = new URL(url);
  if (!u.password) u.password = 'unused';
  return u.toString();
};

const open = (): PgDb =>
  createPgDb({ connectionString: (env.HYPERDRIVE as Hyperdrive | undefined)?.connectionString ?? withPassword(env.DATABASE_URL), maxConnections: 1 });

/** Socket writes `work` costs on `db`. */
async function writesOf(db: PgDb, work: () => Promise<unknown>): Promise<number> {
  const before = db.socketWrites()!;
  await work();
  return db.socketWrites()! - before;
}

const echo = sql('test_pg_socket_echo', 'select $1::int as n');

describe('pg over a workerd socket', () => {
  it('sends each statement in one socket write (parse, bind, describe, execute and sync together)', async () => {
    const db = open();
    try {
      expect(db.socketWrites()).toBe(0);
      await db.query('select 1'); // connects: start-up (and auth, if asked), then the statement
      expect(await writesOf(db, () => db.query(echo, [1]))).toBe(1); // parsed here, on this connection
      expect(await writesOf(db, () => db.query(echo, [2]))).toBe(1); // already parsed: bind, describe, execute, sync
      expect(await writesOf(db, () => db.query('select $1::text as t', ['x']))).toBe(1); // unnamed, with values
      expect(await writesOf(db, () => db.query('select 1'))).toBe(1); // simple protocol
      expect(await db.query(echo, [3])).toEqual([{ n: 3 }]);
      expect(db.connections()).toBe(1);
      // end() still sends Terminate (one write) and closes.
      expect(await writesOf(db, () => db.close())).toBe(1);
    } finally {
      await db.close();
    }
  });

  it('a transaction is one write per statement, BEGIN and COMMIT included', async () => {
    const db = open();
    try {
      await db.query('select 1');
      const writes = await writesOf(db, () => db.transaction(async (tx) => tx.query(echo, [4])));
      expect(writes).toBe(3);
    } finally {
      await db.close();
    }
  });

  it('a statement that fails keeps the connection in step: errors from the server and from binding', async () => {
    const db = open();
    try {
      await expect(db.query(sql('test_pg_socket_missing', 'select n from test_pg_socket_no_such_table where n = $1::int'), [0])).rejects.toThrow(
        /does not exist/,
      );
      // A value pg cannot bind fails inside the corked section: pg then closes
      // the statement and syncs, and those go out in the same single write.
      const unbindable = { toPostgres: () => { throw new Error('cannot bind this value'); } };
      await expect(db.query(sql('test_pg_socket_unbindable', 'select $1::text as t'), [unbindable])).rejects.toThrow(/cannot bind/);
      expect(await db.query(echo, [5])).toEqual([{ n: 5 }]);
      expect(db.connections()).toBe(1);
    } finally {
      await db.close();
    }
  });
});
