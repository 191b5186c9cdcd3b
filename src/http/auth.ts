// Authentication: `Authorization: Bearer <token>`.
// The admin token (a Worker secret) may act on tenant routes too, as the
// tenant named by the `X-Tenant` header (default `default`): handy for
// operators and local use. Tenant keys come with the tenants issue.
import type { MiddlewareHandler } from 'hono';
import { AppError } from '../errors.ts';
import type { AppEnv } from './context.ts';

export const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

/** Constant-time comparison of two strings (by their UTF-8 bytes). */
export function timingSafeEqual(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

export function bearerToken(header: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m ? m[1]! : null;
}

const unauthorized = () => new AppError('unauthorized', 'missing or invalid API key');

export function requireTenant(adminToken: string): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const token = bearerToken(c.req.header('authorization'));
    if (!token || !adminToken || !timingSafeEqual(token, adminToken)) throw unauthorized();
    const tenant = c.req.header('x-tenant') ?? 'default';
    if (!TENANT_PATTERN.test(tenant)) {
      throw new AppError('invalid_request', 'invalid X-Tenant header', [{ path: 'X-Tenant', message: 'a tenant name' }]);
    }
    c.set('tenant', tenant);
    c.set('log', c.var.log.child({ tenant }));
    await next();
  };
}
