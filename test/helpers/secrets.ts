// The test deployment's secrets, one place for the workerd bindings
// (vitest.config.ts) and the Node tests.

/** At least 32 characters: a shorter ADMIN_TOKEN counts as unset. */
export const TEST_ADMIN_TOKEN = 'test-admin-token-of-at-least-32-characters';
export const TEST_SIGNING_SECRET = `whsec_${btoa('test-signing-secret-32-bytes-long')}`;
