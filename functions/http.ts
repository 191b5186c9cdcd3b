// fetch: the HTTP API. The database opened for the request is closed once the
// response and every waitUntil'd follow-up (the dispatch kick) are done.
import { createApp } from '../src/http/app.ts';
import type { App } from '../src/http/context.ts';
import type { Invocation } from '../src/http/context.ts';
import { openDb, sharedFor, tasksQueue } from './deps.ts';
import type { Env } from './env.ts';

const apps = new WeakMap<object, App>();

function appFor(env: Env): App {
  let app = apps.get(env);
  if (!app) {
    const { config, registry, log, signingSecrets } = sharedFor(env);
    app = createApp({ config, registry, log, signingSecrets, adminToken: env.ADMIN_TOKEN ?? '' });
    apps.set(env, app);
  }
  return app;
}

export async function handleFetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
  const db = openDb(env);
  const pending: Promise<unknown>[] = [];
  const invocation: Invocation = { db, sender: tasksQueue(env), pumps: tasksQueue(env), waitUntil: (p) => pending.push(p) };
  try {
    return await appFor(env).fetch(request, invocation, ctx);
  } finally {
    ctx.waitUntil(Promise.allSettled(pending).then(() => db.close()));
  }
}
