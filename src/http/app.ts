// The HTTP API (DESIGN §9), built by a factory so tests and the Worker each
// build their own. Per-invocation dependencies arrive as Hono bindings.
import { OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import type { Config } from '../config.ts';
import { AppError } from '../errors.ts';
import type { Registry } from '../handlers/registry.ts';
import type { Logger } from '../log.ts';
import { requireAdmin, requireTenant } from './auth.ts';
import type { AppEnv } from './context.ts';
import { onError } from './errors.ts';
import { validationHook } from './validation.ts';
import { createKeyCache, type KeyCache } from '../tenants/key-cache.ts';
import { createKicker, type Kicker } from '../sweep/kick.ts';
import { registerAdminRoutes } from './routes/admin.ts';
import { registerQueueRoutes } from './routes/queues.ts';
import { registerScheduleRoutes } from './routes/schedules.ts';
import { registerTaskRoutes } from './routes/tasks.ts';

export interface AppDeps {
  config: Config;
  registry: Registry;
  /** The admin token secret; empty disables admin access. */
  adminToken: string;
  log: Logger;
  /** Checked tenant keys, per isolate; built from config.keyCacheMs when absent. */
  keyCache?: KeyCache;
  /** The dispatch kick after enqueues, per isolate; built from config.kickIntervalMs when absent. */
  kicker?: Kicker;
}

export type App = OpenAPIHono<AppEnv>;

/** Request bodies above these are refused with 413 before they are parsed. */
export const MAX_BODY_BYTES = 1024 * 1024;
export const MAX_BATCH_BODY_BYTES = 10 * 1024 * 1024;

export function createApp(deps: AppDeps): App {
  const app = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

  app.use('*', async (c, next) => {
    const incoming = c.req.header('x-request-id');
    const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : crypto.randomUUID();
    c.set('requestId', requestId);
    c.set('log', deps.log.child({ requestId }));
    await next();
    c.header('x-request-id', requestId);
  });
  app.onError(onError);
  app.notFound(() => {
    throw new AppError('not_found', 'no such route');
  });

  app.get('/healthz', async (c) => {
    await c.env.db.query('select 1');
    return c.json({ ok: true, transport: c.env.db.transport ?? 'neon' });
  });

  // Bodies past the cap are refused with 413 before they are parsed.
  const limited = (maxSize: number) =>
    bodyLimit({
      maxSize,
      onError: () => {
        throw new AppError('payload_too_large', `request body is larger than ${maxSize} bytes`);
      },
    });
  const batchLimit = limited(MAX_BATCH_BODY_BYTES);
  const bodyLimitDefault = limited(MAX_BODY_BYTES);
  app.use('/v1/*', (c, next) => (c.req.path === '/v1/tasks/batch' ? batchLimit(c, next) : bodyLimitDefault(c, next)));
  const keyCache = deps.keyCache ?? createKeyCache({ ttlMs: deps.config.keyCacheMs });
  const tenant = requireTenant(deps.adminToken, keyCache);
  for (const path of ['/v1/tasks', '/v1/tasks/*', '/v1/schedules', '/v1/schedules/*', '/v1/queues']) app.use(path, tenant);
  app.use('/v1/admin/*', requireAdmin(deps.adminToken));
  registerTaskRoutes(app, deps, deps.kicker ?? createKicker({ intervalMs: deps.config.kickIntervalMs }));
  registerScheduleRoutes(app, deps);
  registerQueueRoutes(app);
  registerAdminRoutes(app, { keyCache });

  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'A tenant key (edsk_...) or, for admin routes, the admin token',
  });
  app.doc31('/openapi.json', {
    openapi: '3.1.0',
    info: {
      title: 'Edge scheduler API',
      version: '1',
      description: 'Durable tasks and schedules for the edge. Errors are {"error": {"code", "message", "details"?}}.',
    },
    security: [{ bearer: [] }],
  });
  return app;
}
