// What every workload receives: the shared server, the WebSocket proxy the
// project's driver talks through, the settings, and a CPU meter.
import type { CpuSnapshot } from './cpu.ts';
import type { Server } from './server.ts';
import type { Settings } from './settings.ts';

export interface Ctx {
  server: Server;
  /** `host:port` of the WebSocket proxy. */
  proxy: string;
  settings: Settings;
  cpu: () => CpuSnapshot;
}
