// GET /openapi.json: generated from the zod schemas that validate requests,
// valid OpenAPI 3.1 by a real validator, and listing every route.
import SwaggerParser from '@apidevtools/swagger-parser';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/db.ts';
import { createTestApi } from '../helpers/http.ts';

const t = useTestDatabase();
let api: ReturnType<typeof createTestApi>;
beforeAll(async () => {
  api = createTestApi(t.db);
});

describe('the OpenAPI document', () => {
  it('validates as OpenAPI 3.1', async () => {
    const r = await api.call('GET', '/openapi.json');
    expect(r.status).toBe(200);
    expect(r.body.openapi).toBe('3.1.0');
    await expect(SwaggerParser.validate(structuredClone(r.body))).resolves.toBeTruthy();
  });

  it('lists every /v1 route the app serves, with its request schema', async () => {
    const doc = (await api.call('GET', '/openapi.json')).body;
    const served = api.app.routes
      .filter((r) => r.path.startsWith('/v1/') && !r.path.includes('*') && r.method !== 'ALL')
      .map((r) => `${r.method.toLowerCase()} ${r.path.replace(/:(\w+)/g, '{$1}')}`);
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m} ${path}`),
    );
    expect(served.length).toBeGreaterThanOrEqual(20);
    expect([...new Set(served)].sort()).toEqual([...new Set(documented)].sort());
    // The body schema of POST /v1/tasks is the very zod schema that validates it.
    const body = doc.paths['/v1/tasks'].post.requestBody.content['application/json'].schema;
    const schema = body.$ref ? doc.components.schemas[body.$ref.split('/').at(-1)] : body;
    expect(schema.required).toContain('task');
    expect(schema.additionalProperties).toBe(false);
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
  });
});
