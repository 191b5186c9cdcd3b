// /v1/signing-secret: the caller's own webhook signing secret (issue 10,
// finding 1). A tenant key reads and rotates its tenant's; the admin token
// any tenant's, through X-Tenant. The first read creates the secret.
import { createRoute, z } from '@hono/zod-openapi';
import { DEFAULT_ROTATION_OVERLAP_SECONDS, type TenantSigningSecrets } from '../../tenants/signing-secrets.ts';
import type { App, AppDeps } from '../context.ts';
import { ErrorSchema } from '../schemas/common.ts';
import { SigningSecretRotateSchema, SigningSecretSchema } from '../schemas/signing-secret.ts';
import { commonErrors, json } from './common.ts';

const notConfiguredError = { 409: json(ErrorSchema, 'Signing secrets are not configured on this deployment') };

const getRoute = createRoute({
  method: 'get',
  path: '/v1/signing-secret',
  summary: "The tenant's webhook signing secret (created on first read)",
  responses: { 200: json(SigningSecretSchema, 'The current secret, and the previous one during a rotation'), ...commonErrors, ...notConfiguredError },
});

const rotateRoute = createRoute({
  method: 'post',
  path: '/v1/signing-secret/rotate',
  summary: 'Make a new signing secret; the old one keeps signing for the overlap',
  request: { body: { content: { 'application/json': { schema: SigningSecretRotateSchema } }, required: false } },
  responses: { 200: json(SigningSecretSchema, 'Rotated'), ...commonErrors, ...notConfiguredError },
});

const secretJson = (s: TenantSigningSecrets) => ({
  secret: s.current.secret,
  createdAt: s.current.createdAt.toISOString(),
  ...(s.previous ? { previous: { secret: s.previous.secret, expiresAt: s.previous.expiresAt.toISOString() } } : {}),
});

export function registerSigningSecretRoutes(app: App, deps: AppDeps): void {
  app.openapi(getRoute, async (c) => {
    const secrets = await deps.signingSecrets.get(c.env.db, c.var.tenant, c.env.now);
    // Never a secret in a response that a cache could keep.
    c.header('cache-control', 'no-store');
    return c.json(secretJson(secrets), 200);
  });

  app.openapi(rotateRoute, async (c) => {
    const body = (c.req.valid('json') as z.infer<typeof SigningSecretRotateSchema> | undefined) ?? {};
    const overlapSeconds = body.rotationOverlapSeconds ?? DEFAULT_ROTATION_OVERLAP_SECONDS;
    const secrets = await deps.signingSecrets.rotate(c.env.db, c.var.tenant, { overlapSeconds, now: c.env.now });
    c.var.log.info('signing secret rotated', { overlapSeconds });
    c.header('cache-control', 'no-store');
    return c.json(secretJson(secrets), 200);
  });
}
