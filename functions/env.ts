// The Worker's bindings, as wrangler.toml and `wrangler secret put` define them.
import type { PumpMessage, TaskMessage } from '../src/queue/messages.ts';

export interface Env {
  /** Hyperdrive in front of the database (recommended); when bound, `pg` goes through it. */
  HYPERDRIVE?: Hyperdrive;
  /** `neon` forces the WebSocket driver even with a HYPERDRIVE binding. */
  DATABASE_TRANSPORT?: string;
  /** Secret. Neon's connection string; used when there is no HYPERDRIVE binding. */
  DATABASE_URL: string;
  /** Development only: `host:port` of the WebSocket-to-TCP proxy. */
  DATABASE_WS_PROXY?: string;
  /** Secret. Manages tenants, keys and queues. */
  ADMIN_TOKEN: string;
  /**
   * Secret. The key-encryption key of the tenants' signing secrets (at least
   * 32 characters, e.g. `whsec_` + 32 random bytes); it signs nothing itself.
   */
  SIGNING_SECRET?: string;
  /** The Queue that carries due tasks to the consumer, and pump messages to dispatchers. */
  TASKS: Queue<TaskMessage | PumpMessage>;
  /** Tunables ([vars]); see src/config.ts. */
  [variable: string]: unknown;
}
