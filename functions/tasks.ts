// The task types this Worker runs. Add your own handlers here:
//   defineTask('send-email', z.object({ to: z.email() }), async (payload, ctx) => { ... })
import type { Config } from '../src/config.ts';
import { createHttpTask } from '../src/handlers/http.ts';
import { noopTask } from '../src/handlers/noop.ts';
import type { TaskHandler } from '../src/handlers/registry.ts';

export function taskTypes(options: { config: Config }): TaskHandler<never>[] {
  return [
    noopTask,
    createHttpTask({ allowPrivateTargets: options.config.allowPrivateTargets, allowedPorts: options.config.allowedTargetPorts }),
  ];
}
