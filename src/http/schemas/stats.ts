// /v1/stats: what the dashboard's charts draw.
import { z } from '@hono/zod-openapi';

export const StatsQuery = z.strictObject({
  minutes: z.coerce.number().int().min(1).max(180).default(60),
});

export const MinuteSchema = z
  .object({
    queue: z.string(),
    minute: z.string(),
    finished: z.record(z.string(), z.int()).openapi({ description: 'Tasks finished in this minute, by outcome.' }),
    dueToStartP50: z.number().nullable(),
    dueToStartP99: z.number().nullable(),
  })
  .openapi('MinuteStats');

export type MinuteStatsJson = z.output<typeof MinuteSchema>;
