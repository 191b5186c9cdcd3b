// The task types this Worker runs. Add your own handlers here:
//   defineTask('send-email', z.object({ to: z.email() }), async (payload, ctx) => { ... })
import { noopTask } from '../src/handlers/noop.ts';
import type { TaskHandler } from '../src/handlers/registry.ts';

export const taskTypes: TaskHandler<never>[] = [noopTask];
