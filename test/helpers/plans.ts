// Plans as run (EXPLAIN ANALYZE, rolled back), generic or custom, and the
// rows each scan read: test/tasks/plans.test.ts and list-plans.test.ts.
import { expect } from 'vitest';
import type { Db, Queryable, Sql } from '../../src/db/seam.ts';

export interface PlanNode {
  'Node Type': string;
  'CTE Name'?: string;
  'Relation Name'?: string;
  'Index Name'?: string;
  /** The planner's estimate, in its cost units (compared with jit_above_cost). */
  'Total Cost': number;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

/** Rows a scan read: those it returned and those its filter removed, over all its loops. */
export const rowsRead = (n: PlanNode) => (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'];

/** No scan of `scans` reads more than `bound` rows. */
export function expectReadsAtMost(scans: PlanNode[], bound: number, label: string) {
  for (const n of scans) {
    expect(rowsRead(n), `${label}: rows read by ${n['Node Type']} on ${n['Index Name'] ?? n['Relation Name']}`).toBeLessThanOrEqual(bound);
  }
}

class Rollback extends Error {}

let probes = 0;

/**
 * Runs `write` with its one statement explained, not run: prepared under a
 * name of its own, executed under a generic plan (or, with `custom`, one
 * planned for its values) with EXPLAIN ANALYZE (the values as literals:
 * EXECUTE takes no bind parameters), rolled back. Returns every node of the
 * plan as executed, and the execution time.
 */
export async function explainAsRun(
  db: Db,
  write: (q: Queryable) => Promise<unknown>,
  plan: 'generic' | 'custom',
): Promise<{ nodes: PlanNode[]; ms: number }> {
  let result = { nodes: [] as PlanNode[], ms: 0 };
  const name = `plan_probe_${++probes}`;
  try {
    await db.transaction(async (tx) => {
      const explaining: Queryable = {
        query: (async (s: Sql | string, values: readonly unknown[] = []) => {
          await tx.query(`prepare ${name} as ${typeof s === 'string' ? s : s.text}`);
          const [probe] = await tx.query<{ types: string[] }>(
            `select parameter_types::text[] as types from pg_prepared_statements where name = $1`,
            [name],
          );
          const args: string[] = [];
          for (const [i, type] of probe!.types.entries()) {
            const [quoted] = await tx.query<{ literal: string }>(`select quote_nullable($1::${type}) as literal`, [values[i]]);
            args.push(`${quoted!.literal}::${type}`);
          }
          await tx.query(`set local plan_cache_mode = force_${plan}_plan`);
          const rows = await tx.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] }>(
            `explain (analyze, format json) execute ${name}(${args.join(', ')})`,
          );
          const [explained] = rows[0]!['QUERY PLAN'];
          result = { nodes: nodesOf(explained.Plan), ms: explained['Execution Time'] };
          await tx.query(`deallocate ${name}`);
          throw new Rollback();
        }) as Queryable['query'],
      };
      await write(explaining);
    });
  } catch (error) {
    if (!(error instanceof Rollback)) throw error;
  }
  return result;
}
