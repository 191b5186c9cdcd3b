// Import arrows run down the layers, never back up: the SQL knows nothing of
// the services, the HTTP layer or the Queue handlers that call it, the
// consumer nothing of the sweep, and a route file nothing of the app that
// mounts it. Read from the import lines of the files themselves.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Every .ts file under a directory, relative to the repository root. */
function filesUnder(dir: string): string[] {
  return readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => join(dir, f));
}

/** The repository paths a file imports (relative specifiers only: packages are not layers). */
function importsOf(file: string, text = readFileSync(join(root, file), 'utf8')): string[] {
  const specifiers = [...text.matchAll(/(?:\bfrom|^\s*import|\bimport\()\s*['"](\.{1,2}\/[^'"]+)['"]/gm)].map((m) => m[1]!);
  return specifiers.map((s) => relative(root, resolve(root, dirname(file), s)));
}

/** [importing files, forbidden targets (a directory, or one file)]. */
const RULES: [string, string[]][] = [
  ['src/db', ['src/tasks', 'src/schedules', 'src/http', 'src/sweep', 'src/consume']],
  ['src/queue', ['src/sweep', 'src/consume', 'src/http']],
  ['src/consume', ['src/sweep']],
  ['src/http/routes', ['src/http/app.ts']],
];

const isUnder = (path: string, target: string) => path === target || path.startsWith(`${target}/`);

describe('import arrows', () => {
  for (const [from, forbidden] of RULES) {
    it(`nothing under ${from}/ imports ${forbidden.join(', ')}`, () => {
      const upward = filesUnder(from).flatMap((file) =>
        importsOf(file)
          .filter((target) => forbidden.some((f) => isUnder(target, f)))
          .map((target) => `${file} -> ${target}`),
      );
      expect(upward).toEqual([]);
    });
  }

  it('reads every form of import line', () => {
    const text = [
      "import { a } from '../../tasks/x.ts';",
      "import type { B } from '../sweep/y.ts';",
      'import {\n  c,\n  d,\n} from "./z.ts";',
      "export { e } from '../http/app.ts';",
      "import './side-effect.ts';",
      "const m = await import('../consume/w.ts');",
      "import { z } from 'zod';",
    ].join('\n');
    expect(importsOf('src/db/sql/f.ts', text)).toEqual([
      'src/tasks/x.ts',
      'src/db/sweep/y.ts',
      'src/db/sql/z.ts',
      'src/db/http/app.ts',
      'src/db/sql/side-effect.ts',
      'src/db/consume/w.ts',
    ]);
  });
});
