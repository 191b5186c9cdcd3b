// The database's refusals of a value, as translateDbError answers them: the
// backstop behind the schemas, so a value that slips past validation is a
// 4xx and never a 500. Real errors from the real server.
import { describe, expect, it } from 'vitest';
import { translateDbError } from '../../src/db/errors.ts';
import { AppError } from '../../src/errors.ts';
import { useTestDatabase } from '../helpers/db.ts';

const t = useTestDatabase();

async function refusal(statement: string, values: unknown[] = []): Promise<unknown> {
  try {
    await t.db.query(statement, values);
  } catch (error) {
    return translateDbError(error);
  }
  throw new Error(`not refused: ${statement}`);
}

describe('translateDbError', () => {
  it('a value a CHECK constraint refuses (a tenant weight below the floor) is an invalid request', async () => {
    const e = await refusal(`insert into tenants (queue, tenant, weight) values ('default', 'tiny', 5e-324)`);
    expect(e).toBeInstanceOf(AppError);
    expect(e).toMatchObject({ code: 'invalid_request', details: [{ path: 'request' }] });
    expect((e as AppError).message).toMatch(/tenants_weight_range/);
  });

  it('a data exception (text with NUL, an out-of-range integer) is an invalid request; a program limit is too large', async () => {
    expect(await refusal(`select $1::text`, ['a\u0000b'])).toMatchObject({ code: 'invalid_request' });
    expect(await refusal(`select $1::int`, ['2592000000'])).toMatchObject({ code: 'invalid_request' });
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    expect(await refusal(`select $1::jsonb`, [deep])).toMatchObject({ code: 'payload_too_large' });
  });

  it('anything else is passed on as it is', async () => {
    const e = await refusal(`select * from no_such_table`);
    expect(e).not.toBeInstanceOf(AppError);
  });
});
