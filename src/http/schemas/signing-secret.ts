// /v1/signing-secret: the tenant's webhook signing secret.
import { z } from '@hono/zod-openapi';
import { DEFAULT_ROTATION_OVERLAP_SECONDS, MAX_ROTATION_OVERLAP_SECONDS } from '../../tenants/signing-secrets.ts';

export const SigningSecretSchema = z
  .object({
    secret: z.string().openapi({ description: 'whsec_ and 32 random bytes in base64: verify deliveries with it', example: 'whsec_...' }),
    createdAt: z.string(),
    previous: z
      .object({ secret: z.string(), expiresAt: z.string() })
      .optional()
      .openapi({ description: 'During a rotation: the replaced secret, still signing every delivery until expiresAt' }),
  })
  .openapi('SigningSecret');

export const SigningSecretRotateSchema = z
  .strictObject({
    rotationOverlapSeconds: z
      .int()
      .min(0)
      .max(MAX_ROTATION_OVERLAP_SECONDS)
      .optional()
      .openapi({ description: `How long the old secret keeps signing too (default ${DEFAULT_ROTATION_OVERLAP_SECONDS}; 0: at once)` }),
  })
  .openapi('SigningSecretRotate');
