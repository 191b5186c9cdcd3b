// zod issues as the API's error details: one dotted field path each.
import type { z } from 'zod';
import type { ErrorDetail } from './errors.ts';

/** Flattens zod issues into field paths; an unknown key is named as its own path. */
export function zodDetails(issues: readonly z.core.$ZodIssue[], pathPrefix: string): ErrorDetail[] {
  const join = (path: readonly PropertyKey[]) => [pathPrefix, ...path.map(String)].filter((s) => s !== '').join('.');
  return issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((k) => ({ path: join([...i.path, k]), message: 'unknown field' }))
      : [{ path: join(i.path), message: i.message }],
  );
}
