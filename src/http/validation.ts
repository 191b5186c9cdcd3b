// One hook formats every validation failure the same way: 400, code
// invalid_request, and each offending field's path.
import type { Context } from 'hono';
import type { z } from 'zod';
import { invalid } from '../errors.ts';
import { zodDetails } from '../zod-details.ts';

interface HookResult {
  success: boolean;
  target: string;
  error?: z.ZodError;
}

export function validationHook(result: HookResult, _c: Context): void {
  if (result.success || !result.error) return;
  // Body fields are named as they are; query and path parameters by their name.
  const details = zodDetails(result.error.issues, '').map((d) => ({ ...d, path: d.path || (result.target === 'json' ? 'body' : result.target) }));
  const first = details[0];
  throw invalid(first ? `${first.path}: ${first.message}` : 'invalid request', details);
}
