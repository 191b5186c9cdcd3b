// The trivial built-in task type: does nothing and succeeds. Lets the whole
// path be exercised (and benchmarked) without any user code.
import { z } from 'zod';
import { defineTask } from './registry.ts';

export const noopTask = defineTask('noop', z.record(z.string(), z.unknown()).default({}), async () => undefined);
