// The one Worker: HTTP API, cron sweep and Queue consumer.
import type { PumpMessage, TaskMessage } from '../src/queue/messages.ts';
import { handleScheduled } from './cron.ts';
import type { Env } from './env.ts';
import { handleFetch } from './http.ts';
import { handleQueue } from './queue.ts';

export type { Env } from './env.ts';

export default {
  fetch: handleFetch,
  scheduled: handleScheduled,
  queue: handleQueue,
} satisfies ExportedHandler<Env, TaskMessage | PumpMessage>;
