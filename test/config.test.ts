// LOG_LEVEL: read like every other var, and honoured by the logger.
import { describe, expect, it } from 'vitest';
import { readConfig } from '../src/config.ts';
import { createLogger, type LogLevel } from '../src/log.ts';

describe('LOG_LEVEL', () => {
  it('defaults to info, reads any level, and refuses anything else naming the variable', () => {
    expect(readConfig({}).logLevel).toBe('info');
    expect(readConfig({ LOG_LEVEL: ' warn ' }).logLevel).toBe('warn');
    expect(readConfig({ LOG_LEVEL: '' }).logLevel).toBe('info');
    expect(() => readConfig({ LOG_LEVEL: 'loud' })).toThrow(/LOG_LEVEL/);
    expect(() => readConfig({ LOG_LEVEL: 'WARN\u0000' })).toThrow(/LOG_LEVEL/);
  });

  it('writes the given level and above, children included', () => {
    const written: LogLevel[] = [];
    const log = createLogger({ level: readConfig({ LOG_LEVEL: 'warn' }).logLevel, sink: (level) => written.push(level) });
    const child = log.child({ taskId: '1' });
    for (const l of [log, child]) {
      l.debug('d');
      l.info('i');
      l.warn('w');
      l.error('e');
    }
    expect(written).toEqual(['warn', 'error', 'warn', 'error']);
  });
});
