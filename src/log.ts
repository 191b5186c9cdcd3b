// Structured logs: every line is one JSON object (Workers Logs and `wrangler
// tail` index the fields). Context such as the request id, tenant and task id
// is carried by child loggers rather than repeated at each call.

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

export type LogSink = (level: LogLevel, line: string) => void;

const consoleSink: LogSink = (level, line) => {
  if (level === 'error') console.error(line);
  else if (level === 'warn') console.warn(line);
  else console.log(line);
};

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

function errorFields(value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message } : value;
}

export function createLogger(options: { sink?: LogSink; level?: LogLevel; fields?: LogFields } = {}): Logger {
  const sink = options.sink ?? consoleSink;
  const min = ORDER[options.level ?? 'info'];
  const base = options.fields ?? {};
  const write = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (ORDER[level] < min) return;
    const record: LogFields = { level, msg, ...base };
    for (const [k, v] of Object.entries(fields ?? {})) record[k] = errorFields(v);
    sink(level, JSON.stringify(record));
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger({ sink, level: options.level, fields: { ...base, ...fields } }),
  };
}

/** Discards everything; for tests that do not look at logs. */
export const silentLogger: Logger = createLogger({ sink: () => {} });
