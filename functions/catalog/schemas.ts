import { z } from '@hono/zod-openapi';
import { postLogoutRedirectUrisSchema, redirectUrisSchema } from '../auth/index.ts';
import { oneLineName } from '../http/router.ts';
import { iso } from '../platform/clock.ts';

/**
 * The catalog's request and response shapes. Handlers validate with these and the OpenAPI document is
 * generated from them, so the docs cannot drift from what the code accepts.
 */

export const agentStatusSchema = z.enum(['draft', 'active', 'coming_soon', 'inactive']).openapi('AgentStatus');
export type AgentStatus = z.infer<typeof agentStatusSchema>;

const slugSchema = z
  .string()
  .min(2)
  .max(80)
  .regex(/^[a-z0-9]+(-[a-z0-9]+)*$/, 'slug must be lowercase letters and digits separated by single hyphens');

export const tagSchema = z
  .object({
    id: z.uuid(),
    slug: z.string().openapi({ example: 'customer-support' }),
    name: z.string().openapi({ example: 'Customer support' }),
    createdAt: z.string(),
  })
  .openapi('Tag');

export const tagRefSchema = z.object({ id: z.uuid(), slug: z.string(), name: z.string() }).openapi('TagRef');

export const capabilitySchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    position: z.int().openapi({ description: '1-based order on the agent page' }),
    title: z.string(),
    description: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Capability');

export const stepSchema = capabilitySchema.openapi('Step');

export const changelogEntrySchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    version: z.string().openapi({ example: '1.2.0' }),
    title: z.string().nullable(),
    body: z.string(),
    createdAt: z.string(),
  })
  .openapi('ChangelogEntry');

export const videoSchema = z
  .object({ id: z.uuid(), agentId: z.uuid(), url: z.string(), title: z.string().nullable(), createdAt: z.string() })
  .openapi('Video');

export const agentSummarySchema = z
  .object({
    id: z.uuid(),
    slug: z.string(),
    name: z.string(),
    description: z.string(),
    status: agentStatusSchema,
    installs: z.int(),
    reviewCount: z.int(),
    averageRating: z.number().nullable().openapi({ description: 'Mean rating 1..5 rounded to 2 decimals; null without reviews' }),
    tags: z.array(tagRefSchema),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('AgentSummary');

export const agentSchema = agentSummarySchema
  .extend({
    longDescription: z.string().nullable(),
    capabilities: z.array(capabilitySchema),
    steps: z.array(stepSchema),
    changelog: z.array(changelogEntrySchema),
  })
  .openapi('Agent');

export const oauthClientSecretSchema = z
  .object({ clientId: z.string(), clientSecret: z.string() })
  .openapi('AgentOAuthClientSecret', { description: 'Shown once, at creation' });

export const createdAgentSchema = agentSchema.extend({ oauthClient: oauthClientSecretSchema }).openapi('CreatedAgent');

export const contentItemInput = z.object({
  title: z.string().trim().min(1).max(200),
  description: z.string().max(5000).optional(),
});

const tagNamesSchema = z
  .array(oneLineName(60))
  .max(20)
  .openapi({ description: 'Tag names or slugs; tags that do not exist yet are created' });

export const createAgentBody = z
  .object({
    slug: slugSchema,
    name: oneLineName(120),
    description: z.string().max(500),
    longDescription: z.string().max(20000).nullable().optional(),
    status: agentStatusSchema.optional().openapi({ description: 'Defaults to draft' }),
    redirectUris: redirectUrisSchema,
    postLogoutRedirectUris: postLogoutRedirectUrisSchema.optional(),
    tags: tagNamesSchema.optional(),
    capabilities: z.array(contentItemInput).max(50).optional(),
    steps: z.array(contentItemInput).max(50).optional(),
  })
  .openapi('CreateAgent');

export const updateAgentBody = z
  .object({
    slug: slugSchema.optional(),
    name: oneLineName(120).optional(),
    description: z.string().max(500).optional(),
    longDescription: z.string().max(20000).nullable().optional(),
    status: agentStatusSchema.optional(),
    tags: tagNamesSchema.optional().openapi({ description: 'Replaces the agent’s tags when present' }),
    capabilities: z.array(contentItemInput).max(50).optional().openapi({ description: 'Replaces every capability when present' }),
    steps: z.array(contentItemInput).max(50).optional().openapi({ description: 'Replaces every step when present' }),
  })
  .openapi('UpdateAgent');

// Each filter given empty (`?q=&tag=`, what a search form sends for a field left blank) is the same as not given
// (review 112: a blank search box answered 400); functions/catalog/agents.ts reads them so.
const BLANK = ' An empty value is the same as none.';
export const listAgentsQuery = z.object({
  status: agentStatusSchema.or(z.literal('')).optional().openapi({ param: { name: 'status', in: 'query' }, description: BLANK.trim() }),
  tag: z.string().max(60).optional().openapi({ param: { name: 'tag', in: 'query' }, description: `Tag slug.${BLANK}` }),
  q: z.string().trim().max(200).optional().openapi({ param: { name: 'q', in: 'query' }, description: `Full-text search over name and description.${BLANK}` }),
  pricing: z.enum(['free', 'paid', '']).optional().openapi({
    param: { name: 'pricing', in: 'query' },
    description: `\`free\`: has a public free tier; \`paid\`: has a public paid tier.${BLANK}`,
  }),
});

export const addContentBody = z
  .object({
    title: z.string().trim().min(1).max(200),
    description: z.string().max(5000).optional(),
    position: z.int().min(1).optional().openapi({ description: '1-based; defaults to the end; later items move down' }),
  })
  .openapi('AddContentItem');

export const updateContentBody = z
  .object({
    title: z.string().trim().min(1).max(200).optional(),
    description: z.string().max(5000).optional(),
    position: z.int().min(1).optional(),
  })
  .openapi('UpdateContentItem');

export const addChangelogBody = z
  .object({
    version: z.string().trim().min(1).max(50),
    title: z.string().trim().max(200).optional(),
    body: z.string().max(20000).optional(),
  })
  .openapi('AddChangelogEntry');

export const registerVideoBody = z
  .object({ url: z.string().max(2000), title: z.string().trim().max(200).optional() })
  .openapi('RegisterVideo');

export const createUploadBody = z
  .object({
    kind: z.enum(['image', 'video']),
    contentType: z.string().min(3).max(100).openapi({ example: 'video/mp4' }),
    filename: z.string().trim().min(1).max(200).openapi({ example: 'demo.mp4' }),
    sizeBytes: z
      .int()
      .min(1)
      .optional()
      .openapi({
        description:
          'Exact size of the file in bytes (1 up to the kind\'s limit: image 10 MiB, video 500 MiB). Recommended: signed into the upload, with S3 as its Content-Length (the PUT must send exactly this many bytes), with local storage as the most it accepts. Without it, local storage accepts up to the kind\'s limit and S3 up to its own 5 GB per PUT',
        example: 1048576,
      }),
  })
  .openapi('CreateUpload');

export const uploadSchema = z
  .object({
    uploadUrl: z.string().openapi({ description: 'PUT the file here with the same Content-Type' }),
    publicUrl: z.string(),
    expiresAt: z.string(),
    method: z.literal('PUT'),
    headers: z.record(z.string(), z.string()).openapi({ description: 'Headers the PUT must carry' }),
    maxBytes: z.int().openapi({ description: "The declared sizeBytes, else the kind's limit: the upload may not be larger (without a declared size, S3 does not enforce it)" }),
  })
  .openapi('Upload');

export const createTagBody = z
  .object({ name: oneLineName(60), slug: slugSchema.max(60).optional() })
  .openapi('CreateTag');

export const reviewSchema = z
  .object({
    id: z.uuid(),
    agentId: z.uuid(),
    userId: z.string().nullable().openapi({
      description:
        "The author's id, shown to the author (with their own credentials, not an agent's token) and to admins; null to everyone else: it is the id every agent the author uses knows them by",
    }),
    rating: z.int().min(1).max(5),
    title: z.string().nullable(),
    body: z.string().nullable(),
    writtenByAgent: z.boolean().openapi({
      description:
        "Written, or last replaced, by the agent's own backend with the user's token; a review the user wrote themselves is changed or deleted only by them or an admin",
    }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Review');

export const upsertReviewBody = z
  .object({
    rating: z.int().min(1).max(5),
    title: z.string().trim().max(200).optional(),
    body: z.string().max(5000).optional(),
  })
  .openapi('UpsertReview');

export const interactionTypeSchema = z
  .enum(['user_signup', 'demo_request', 'enterprise_inquiry', 'waitlist_signup', 'install'])
  .openapi('InteractionType');

export const interactionSchema = z
  .object({
    id: z.uuid(),
    type: interactionTypeSchema,
    userId: z.string().nullable(),
    agentId: z.uuid().nullable(),
    metadata: z.record(z.string(), z.unknown()),
    createdAt: z.string(),
  })
  .openapi('Interaction');

export const demoRequestBody = z.object({ message: z.string().trim().max(2000).optional() }).openapi('DemoRequest');

export const enterpriseInquiryBody = z
  .object({
    message: z.string().trim().max(5000).optional(),
    companySize: z.string().trim().min(1).max(50).optional().openapi({ example: '51-200' }),
  })
  .openapi('EnterpriseInquiry');

export const joinWaitlistBody = z.object({ email: z.email().max(320) }).openapi('JoinWaitlist');

export const waitlistEntrySchema = z
  .object({ agentId: z.uuid(), email: z.string(), notified: z.literal(true), createdAt: z.string() })
  .openapi('WaitlistEntry');

export const notificationRecipientSchema = z
  .object({ id: z.uuid(), email: z.string(), name: z.string().nullable(), createdAt: z.string(), updatedAt: z.string() })
  .openapi('NotificationRecipient');

export const addRecipientBody = z
  .object({ email: z.email().max(320), name: z.string().trim().max(120).optional() })
  .openapi('AddNotificationRecipient');

export const updateRecipientBody = z
  .object({ email: z.email().max(320).optional(), name: z.string().trim().max(120).nullable().optional() })
  .openapi('UpdateNotificationRecipient');

export { iso };
