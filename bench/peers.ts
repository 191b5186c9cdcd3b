// Result shapes the peer adapters (pgboss.ts, graphile.ts) share.
import type { CpuUse } from './cpu.ts';
import type { Delta } from './pgstats.ts';

export interface PeerRate {
  tasks: number;
  seconds: number;
  rate: number;
}

export interface PeerDrainResult extends PeerRate {
  finishedRows: number;
  pg: Delta;
  waits: { samples: number; busy: number; waits: Record<string, number> };
  cpu: CpuUse;
  note: string;
}

export const seedNote = (rows: number) => (rows > 0 ? `${rows} finished rows seeded, then VACUUM ANALYZE` : 'empty table');
