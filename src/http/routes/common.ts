// Shared pieces of route definitions.
import type { z } from '@hono/zod-openapi';
import { ErrorSchema } from '../schemas/common.ts';

export const json = <S extends z.ZodType>(schema: S, description: string) => ({
  content: { 'application/json': { schema } },
  description,
});

export const jsonBody = <S extends z.ZodType>(schema: S) => ({
  body: { content: { 'application/json': { schema } }, required: true },
});

/** Errors every authenticated route may answer. */
export const commonErrors = {
  400: json(ErrorSchema, 'Invalid request; details name each field'),
  401: json(ErrorSchema, 'Missing or invalid key'),
};
export const notFoundError = (what: string) => ({ 404: json(ErrorSchema, `No such ${what}`) });
export const conflictError = (why: string) => ({ 409: json(ErrorSchema, why) });
export const quotaError = (which: string) => ({
  429: json(ErrorSchema, `Quota exceeded (${which}); nothing was written. Retry-After is set where waiting helps`),
});
