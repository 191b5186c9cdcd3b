// The HTTP API (DESIGN §9), built by a factory so tests and the Worker each
// build their own. Per-invocation dependencies arrive as Hono bindings.
import { OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { AppError } from '../errors.ts';
import { readTraceContext, traceIdOf } from '../tracing/trace-context.ts';
import { requireAdmin, requireCaller, requireTenant, usableAdminToken } from './auth.ts';
import type { App, AppDeps, AppEnv } from './context.ts';
import { onError } from './errors.ts';
import { refuseHostileJson } from './hostile-json.ts';
import { validationHook } from './validation.ts';
import { createKeyCache } from '../tenants/key-cache.ts';
import { createKicker } from '../sweep/kick.ts';
import { registerAdminRoutes } from './routes/admin.ts';
import { registerConcurrencyRoutes } from './routes/concurrency.ts';
import { registerMetricsRoute } from './routes/metrics.ts';
import { registerQueueRoutes } from './routes/queues.ts';
import { registerReplayRoutes } from './routes/replay.ts';
import { registerScheduleRoutes } from './routes/schedules.ts';
import { registerSigningSecretRoutes } from './routes/signing-secret.ts';
import { registerStatsRoutes } from './routes/stats.ts';
import { registerTaskRoutes } from './routes/tasks.ts';
import { registerTriggerRoutes } from './routes/trigger.ts';

/** Request bodies above these are refused with 413 before they are parsed. */
export const MAX_REQUEST_BODY_BYTES = 1024 * 1024;
export const MAX_BATCH_BODY_BYTES = 10 * 1024 * 1024;

export function createApp(appDeps: AppDeps): App {
  // Per isolate (the app is built once per isolate): the key cache and the kicker.
  const deps: AppDeps = {
    ...appDeps,
    keyCache: appDeps.keyCache ?? createKeyCache({ ttlMs: appDeps.config.keyCacheMs }),
    kicker: appDeps.kicker ?? createKicker({ intervalMs: appDeps.config.kickIntervalMs }),
  };
  const app = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

  app.use('*', async (c, next) => {
    const incoming = c.req.header('x-request-id');
    const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : crypto.randomUUID();
    c.set('requestId', requestId);
    // W3C trace context: kept with enqueued tasks; every log line of the request carries its trace id.
    const trace = readTraceContext(c.req.header('traceparent'), c.req.header('tracestate'));
    c.set('trace', trace);
    c.set('log', deps.log.child(trace ? { requestId, traceId: traceIdOf(trace.traceparent) } : { requestId }));
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
  const bodyLimitDefault = limited(MAX_REQUEST_BODY_BYTES);
  app.use('/v1/*', (c, next) => (c.req.path === '/v1/tasks/batch' ? batchLimit(c, next) : bodyLimitDefault(c, next)));
  const adminToken = usableAdminToken(deps.adminToken, deps.log);
  const keyCache = deps.keyCache!;
  const tenant = requireTenant(adminToken, keyCache);
  const tenantPaths = [
    '/v1/tasks', '/v1/tasks/*', '/v1/schedules', '/v1/schedules/*', '/v1/queues',
    '/v1/signing-secret', '/v1/signing-secret/*', '/v1/stats/*', '/v1/concurrency/*', '/v1/rate-limits/*',
  ];
  for (const path of tenantPaths) app.use(path, tenant);
  app.use('/metrics', requireCaller(adminToken, keyCache));
  app.use('/v1/admin/*', requireAdmin(adminToken));
  // After authentication (a 401 first), before validation and every statement.
  app.use('/v1/*', refuseHostileJson());
  registerTaskRoutes(app, deps);
  registerReplayRoutes(app, deps);
  registerScheduleRoutes(app, deps);
  registerTriggerRoutes(app, deps);
  registerQueueRoutes(app);
  registerConcurrencyRoutes(app);
  registerSigningSecretRoutes(app, deps);
  registerAdminRoutes(app, deps, keyCache);
  registerStatsRoutes(app);
  registerMetricsRoute(app, deps);

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
