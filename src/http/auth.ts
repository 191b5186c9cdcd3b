// Authentication: `Authorization: Bearer <token>`.
// Tenant routes take a tenant key (`edsk_...`): every query is scoped by the
// key's tenant, never by a tenant named in a request. The admin token (a
// Worker secret) may act on tenant routes too, as the tenant named by the
// `X-Tenant` header (default `default`), for operators and local use; admin
// routes take only the admin token. Every failure is the same 401, revealing
// nothing about which keys or tenants exist.
import type { MiddlewareHandler } from 'hono';
import { timingSafeEqual } from '../crypto.ts';
import { AppError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { KeyCache } from '../tenants/key-cache.ts';
import type { AppEnv } from './context.ts';
import { TENANT_PATTERN } from './schemas/tenants.ts';

/** An admin token shorter than this counts as unset: a guessable token must not open every tenant. */
export const MIN_ADMIN_TOKEN_LENGTH = 32;

/**
 * The admin token to accept: the configured one, or '' (admin access
 * disabled) when it is shorter than MIN_ADMIN_TOKEN_LENGTH, with a warning.
 * Called once per app, so once per isolate.
 */
export function usableAdminToken(configured: string, log: Logger): string {
  if (configured.length === 0) return '';
  if (configured.length < MIN_ADMIN_TOKEN_LENGTH) {
    log.warn('ADMIN_TOKEN is shorter than 32 characters and counts as unset: admin access is disabled', {
      length: configured.length,
      minimum: MIN_ADMIN_TOKEN_LENGTH,
    });
    return '';
  }
  return configured;
}

export function bearerToken(header: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m ? m[1]! : null;
}

const unauthorized = () => new AppError('unauthorized', 'missing or invalid API key');

const isAdmin = (token: string, adminToken: string) => adminToken.length > 0 && timingSafeEqual(token, adminToken);

/** `keys` checks tenant keys, trusting a checked key for a few seconds (tenants/key-cache.ts). */
export function requireTenant(adminToken: string, keys: KeyCache): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    // Registered for '/v1/tasks' and '/v1/tasks/*', and Hono matches both for
    // POST /v1/tasks: check once, or every enqueue looks its key up twice.
    if (c.get('tenant') !== undefined) return next();
    const token = bearerToken(c.req.header('authorization'));
    if (!token) throw unauthorized();
    let tenant: string | null;
    if (isAdmin(token, adminToken)) {
      tenant = c.req.header('x-tenant') ?? 'default';
      if (!TENANT_PATTERN.test(tenant)) {
        throw new AppError('invalid_request', 'invalid X-Tenant header', [{ path: 'X-Tenant', message: 'a tenant name' }]);
      }
    } else {
      tenant = await keys.tenantFor(c.env.db, token);
      if (!tenant) throw unauthorized();
    }
    c.set('tenant', tenant);
    c.set('log', c.var.log.child({ tenant }));
    await next();
  };
}

export function requireAdmin(adminToken: string): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const token = bearerToken(c.req.header('authorization'));
    if (!token || !isAdmin(token, adminToken)) throw unauthorized();
    await next();
  };
}

/**
 * Either credential, for read-only views that span tenants for the admin
 * (GET /metrics): the admin token sees every tenant (no X-Tenant), a tenant
 * key only its own.
 */
export function requireCaller(adminToken: string, keys: KeyCache): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const token = bearerToken(c.req.header('authorization'));
    if (!token) throw unauthorized();
    if (isAdmin(token, adminToken)) {
      c.set('caller', { admin: true, tenant: null });
    } else {
      const tenant = await keys.tenantFor(c.env.db, token);
      if (!tenant) throw unauthorized();
      c.set('caller', { admin: false, tenant });
      c.set('log', c.var.log.child({ tenant }));
    }
    await next();
  };
}
