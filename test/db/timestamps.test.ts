// Timestamps as both transports read them (rememberingTimestamps, pooled.ts):
// the driver's own timestamptz parser, remembering its last answer, since a
// batch's rows mostly share their timestamps. Each value is still a Date of
// its own, and what the driver parses other than a Date comes through as is.
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import ws from 'ws';
import { localProxy } from '../../scripts/node-db.ts';
import { createNeonDb } from '../../src/db/neon.ts';
import { createPgDb } from '../../src/db/pg.ts';
import type { Db } from '../../src/db/seam.ts';
import { useTestDatabase } from '../helpers/db.ts';

const t = useTestDatabase();
let wsProxy: string;
const opened: Db[] = [];

beforeAll(async () => {
  wsProxy = inject('wsProxy') ?? (await localProxy()).address;
});
afterAll(async () => {
  await Promise.all(opened.map((db) => db.close()));
});

const transports: Record<string, (url: string) => Db> = {
  hyperdrive: (url) => createPgDb({ connectionString: url, maxConnections: 1 }),
  neon: (url) => createNeonDb({ connectionString: url, wsProxy, webSocketConstructor: ws, maxConnections: 1 }),
};

describe.each(Object.keys(transports))('timestamps over %s', (name) => {
  it('repeated values parse to equal, separate Dates; infinities and other zones as the driver reads them', async () => {
    const db = transports[name]!(t.url);
    opened.push(db);
    const rows = await db.query<{ ts: Date | number; n: number }>(
      `select ts, n from (values (1, '2026-12-07 10:00:00.123456+00'::timestamptz), (2, '2026-12-07 10:00:00.123456+00'),
                                 (3, 'infinity'), (4, '-infinity'), (5, '2026-12-07 12:30:00+02:30'),
                                 (6, '2026-12-07 10:00:00.123456+00'), (7, '1999-01-08 04:05:06 BC'), (8, null)) v(n, ts)
       order by n`,
    );
    const times = rows.map((r) => (r.ts instanceof Date ? r.ts.getTime() : r.ts));
    const first = Date.UTC(2026, 11, 7, 10, 0, 0, 123);
    expect(times.slice(0, 6)).toEqual([first, first, Infinity, -Infinity, Date.UTC(2026, 11, 7, 10, 0, 0), first]);
    expect(times[7]).toBeNull();
    expect(rows[6]!.ts).toBeInstanceOf(Date);
    expect((rows[6]!.ts as Date).getUTCFullYear()).toBe(-1998);
    // Separate objects: changing one leaves the others.
    expect(rows[1]!.ts).not.toBe(rows[0]!.ts);
    (rows[0]!.ts as Date).setTime(0);
    expect((rows[1]!.ts as Date).getTime()).toBe(first);
    expect((rows[5]!.ts as Date).getTime()).toBe(first);
  });
});
