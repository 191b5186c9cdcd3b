// A least-recently-used map with a fixed capacity, for every cache keyed by
// user input (cron expressions, time zone spellings): a tenant sending
// thousands of distinct keys evicts old entries instead of growing the
// isolate (3,000 zone spellings once grew workerd by 300 MB).

export interface Lru<K, V> {
  get(key: K): V | undefined;
  set(key: K, value: V): void;
  readonly size: number;
  clear(): void;
}

export function createLru<K, V>(capacity: number): Lru<K, V> {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('LRU capacity must be a positive integer');
  // A Map iterates in insertion order: re-inserting on a hit keeps the least recently used first.
  const map = new Map<K, V>();
  return {
    get(key) {
      const value = map.get(key);
      if (value === undefined) return undefined;
      map.delete(key);
      map.set(key, value);
      return value;
    },
    set(key, value) {
      map.delete(key);
      map.set(key, value);
      if (map.size > capacity) map.delete(map.keys().next().value as K);
    },
    get size() {
      return map.size;
    },
    clear: () => map.clear(),
  };
}
