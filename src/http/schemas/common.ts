// Pieces every resource's schemas share: the error body, names, instants,
// ids, and keyset paging. The schemas validate requests, and the same
// definitions produce /openapi.json: nothing about the wire format is
// described twice.
import { z } from '@hono/zod-openapi';

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: 'invalid_request' }),
      message: z.string(),
      details: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    }),
  })
  .openapi('Error');

/** The one pattern of names (queues, task types, tenants, schedules), up to maxLength characters. */
export const namePattern = (maxLength: number) => new RegExp(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,${maxLength - 1}}$`);

export const nameSchema = (maxLength: number) =>
  z.string().regex(namePattern(maxLength), `letters, digits and _ . : - (at most ${maxLength}, starting with a letter or digit)`);

export const QueueName = nameSchema(64).openapi({ example: 'default' });

export const Instant = z.iso.datetime({ offset: true }).openapi({ example: '2026-12-01T09:00:00Z' });

export const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/** The largest id a bigint column holds. */
const MAX_BIGINT = 9_223_372_036_854_775_807n;
export const isId = (s: string) => /^[1-9]\d{0,18}$/.test(s) && BigInt(s) <= MAX_BIGINT;
const ID_MESSAGE = 'an id (digits, at most 9223372036854775807)';

/** A task id in a body: a positive bigint, as a string. */
export const TaskIdString = z.string().refine(isId, ID_MESSAGE).openapi({ example: '42' });

/** `{id}` in a path: a positive bigint, as a string. */
export const IdParam = z.object({
  id: z
    .string()
    .refine(isId, ID_MESSAGE)
    .openapi({ param: { name: 'id', in: 'path' }, example: '42' }),
});

/**
 * Keyset paging over opaque cursors: a cursor is the last key of a page (a
 * task id, a schedule name, an occurrence's fire time), tagged with its kind
 * so a cursor of one listing is refused by another. The query decodes it
 * once, to the key; `read` asks for one row more than the page to know
 * whether another page follows.
 */
export function paging(kind: string, isKey: (key: string) => boolean) {
  const encode = (key: string) => btoa(`${kind}:${key}`).replace(/=+$/, '');
  const decode = (cursor: string): string | null => {
    try {
      const text = atob(cursor);
      const key = text.startsWith(`${kind}:`) ? text.slice(kind.length + 1) : '';
      return isKey(key) ? key : null;
    } catch {
      return null;
    }
  };
  return {
    query: {
      limit: z.coerce.number().int().min(1).max(500).default(50),
      cursor: z
        .string()
        .max(200)
        .transform((cursor, ctx) => {
          const key = decode(cursor);
          if (key === null) ctx.addIssue({ code: 'custom', message: 'not a cursor from a previous page' });
          return key ?? z.NEVER;
        })
        .optional()
        .openapi({ description: 'nextCursor of the previous page' }),
    },
    async read<T>(
      q: { limit: number; cursor?: string },
      readRows: (afterKey: string | undefined, limit: number) => Promise<T[]>,
      keyOf: (row: T) => string,
    ): Promise<{ page: T[]; nextCursor: string | null }> {
      const rows = await readRows(q.cursor, q.limit + 1);
      const page = rows.slice(0, q.limit);
      const last = page.at(-1);
      return { page, nextCursor: rows.length > q.limit && last !== undefined ? encode(keyOf(last)) : null };
    },
  };
}
