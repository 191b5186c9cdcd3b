// The one place the dashboard imports the typed client from: if the client
// moves (its own package), only this line changes.
export { ApiError, createClient } from '../../packages/client/src/index.ts';
export type { ApiKey, Attempt, Client, MinuteStats, QueueStats, Schedule, Task, TaskListQuery, TaskStatus } from '../../packages/client/src/index.ts';
