// GET /metrics: Prometheus text exposition. The admin token sees every
// tenant; a tenant key its own. One statement per scrape (metrics_snapshot),
// whose cost follows live work and the last five minutes, never the history.
import { readMetricsSnapshot } from '../../db/sql/stats.ts';
import { METRICS_CONTENT_TYPE, renderMetrics } from '../../metrics/exposition.ts';
import type { App, AppDeps } from '../context.ts';

/** The window of the "recent" series (finished by outcome, the summaries). */
export const METRICS_WINDOW_SECONDS = 300;

export function registerMetricsRoute(app: App, deps: AppDeps): void {
  app.get('/metrics', async (c) => {
    const maxTenants = deps.config.metricsMaxTenants;
    const snapshot = await readMetricsSnapshot(c.env.db, {
      now: c.env.now,
      tenant: c.var.caller.tenant,
      windowSeconds: METRICS_WINDOW_SECONDS,
      maxTenants,
    });
    return c.body(renderMetrics(snapshot, { windowSeconds: METRICS_WINDOW_SECONDS, maxTenants }), 200, {
      'content-type': METRICS_CONTENT_TYPE,
      'cache-control': 'no-store',
    });
  });
}
