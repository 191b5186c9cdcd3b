// Time zone names are stored canonical, and every cache keyed by user input
// is bounded (issue 10, finding 7): 3,000 spellings of one zone once grew
// workerd by 300 MB.
import { beforeEach, describe, expect, it } from 'vitest';
import { createLru } from '../../src/cache.ts';
import { canonicalZoneName, nextFireTimes, recurrenceCacheSizes, validateSpec } from '../../src/schedules/recurrence.ts';
import { resetTables, T0, useTestDatabase } from '../helpers/db.ts';
import { seeded } from '../helpers/faults.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;

beforeEach(async () => {
  await resetTables(t.db);
  api = createTestApi(t.db);
  api.setNow(T0);
});

/** A zone name with each letter's case flipped at random (New_York has 2^14 spellings). */
function spellings(name: string, count: number, seed: number): string[] {
  const random = seeded(seed);
  const out = new Set<string>();
  while (out.size < count) out.add([...name].map((c) => (random() < 0.5 ? c.toUpperCase() : c.toLowerCase())).join(''));
  return [...out];
}

describe('time zone names', () => {
  it('are stored and answered in their canonical spelling', async () => {
    const r = await api.admin('PUT', '/v1/schedules/paris', { tenant: 'acme', body: { cron: '0 9 * * *', timezone: 'eUrOpE/pArIs', task: 'noop' } });
    expect(r.status).toBe(201);
    expect(r.body.timezone).toBe('Europe/Paris');
    const [row] = await t.db.query<{ timezone: string }>(`select timezone from schedules where name = 'paris'`);
    expect(row!.timezone).toBe('Europe/Paris');
    expect(canonicalZoneName('america/NEW_york')).toBe('America/New_York');
    expect(canonicalZoneName('+05:00')).toBeUndefined();
    expect(canonicalZoneName('Mars/Olympus_Mons')).toBeUndefined();
    const bad = await api.admin('PUT', '/v1/schedules/mars', { tenant: 'acme', body: { cron: '0 9 * * *', timezone: 'mars/olympus', task: 'noop' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details[0].path).toBe('timezone');
  });

  it('3,000 spellings of one zone are one cached zone, and every cache stays bounded', () => {
    const expected = nextFireTimes({ kind: 'cron', cron: '0 9 * * *', timezone: 'America/New_York' }, T0, 3).map(String);
    for (const spelling of spellings('America/New_York', 3_000, 1)) {
      expect(validateSpec({ kind: 'cron', cron: '0 9 * * *', timezone: spelling })).toEqual([]);
      expect(nextFireTimes({ kind: 'cron', cron: '0 9 * * *', timezone: spelling }, T0, 3).map(String)).toEqual(expected);
    }
    // Distinct cron expressions from a hostile tenant: 0-59 minutes x 0-23 hours x 3 day fields.
    for (const day of ['*', '1', '15']) {
      for (let h = 0; h < 24; h++) for (let m = 0; m < 60; m++) validateSpec({ kind: 'cron', cron: `${m} ${h} ${day} * *`, timezone: 'UTC' });
    }
    const sizes = recurrenceCacheSizes();
    expect(sizes.spellings).toBeLessThanOrEqual(512);
    expect(sizes.zones).toBeLessThanOrEqual(128);
    expect(sizes.crons).toBeLessThanOrEqual(2_000);
  });
});

describe('createLru', () => {
  it('evicts the least recently used entry past its capacity', () => {
    const lru = createLru<string, number>(2);
    lru.set('a', 1);
    lru.set('b', 2);
    expect(lru.get('a')).toBe(1); // a is now the most recent
    lru.set('c', 3);
    expect(lru.get('b')).toBeUndefined();
    expect(lru.get('a')).toBe(1);
    expect(lru.get('c')).toBe(3);
    expect(lru.size).toBe(2);
    expect(() => createLru(0)).toThrow(RangeError);
  });
});
