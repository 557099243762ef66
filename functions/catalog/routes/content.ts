import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../../http/access.ts';
import { viewerIsAdmin } from './viewer.ts';
import { envelopeOf, ok } from '../../http/envelope.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam } from '../../http/router.ts';
import { addContent, deleteContent, listContent, updateContent, type ContentKind } from '../agent-content.ts';
import { requireAgent } from '../agents.ts';
import { addChangelogEntry, deleteChangelogEntry, listChangelog } from '../changelog.ts';
import {
  addChangelogBody,
  addContentBody,
  capabilitySchema,
  changelogEntrySchema,
  createUploadBody,
  registerVideoBody,
  stepSchema,
  updateContentBody,
  uploadSchema,
  videoSchema,
} from '../schemas.ts';
import { createUpload } from '../uploads.ts';
import { deleteVideo, listVideos, registerVideo } from '../videos.ts';
import { security } from './agents.ts';

/** An agent's content: capabilities, how-it-works steps, changelog, videos and media uploads. */

const tags = ['Catalog content'];
const agentIdParams = z.object({ agentId: uuidParam('agentId') });
const idSchema = z.object({ id: z.uuid() });

function contentRoutesFor(kind: ContentKind) {
  const one = kind === 'capabilities' ? 'Capability' : 'Step';
  const base = kind === 'capabilities' ? '/agents/{agentId}/capabilities' : '/agents/{agentId}/capabilities/steps';
  const idName = kind === 'capabilities' ? 'capabilityId' : 'stepId';
  const schema = kind === 'capabilities' ? capabilitySchema : stepSchema;
  // The item id is named for its kind (capabilityId / stepId), so the params are a record of uuids.
  const itemParams = z.object({ agentId: uuidParam('agentId'), [idName]: uuidParam(idName) }) as z.ZodObject<
    Record<string, ReturnType<typeof uuidParam>>
  >;
  return {
    list: createRoute({
      operationId: kind === 'capabilities' ? 'listCapabilities' : 'listSteps',
      method: 'get',
      path: base,
      tags,
      summary: `${one === 'Step' ? 'How-it-works steps' : 'Capabilities'} of an agent, in order (not paginated)`,
      request: { params: agentIdParams },
      responses: { 200: jsonResponse(envelopeOf(z.array(schema)), 'The list'), ...errors(400, 404, 'agentPath') },
    }),
    add: createRoute({
      operationId: kind === 'capabilities' ? 'addCapability' : 'addStep',
      method: 'post',
      path: base,
      tags,
      summary: `Add a ${one.toLowerCase()} (at \`position\`, default last; later ones move down)`,
      security,
      request: { params: agentIdParams, body: jsonBody(addContentBody) },
      responses: { 201: jsonResponse(envelopeOf(schema), `The ${one.toLowerCase()}`), ...errors(400, 401, 403, 404) },
    }),
    update: createRoute({
      operationId: kind === 'capabilities' ? 'updateCapability' : 'updateStep',
      method: 'patch',
      path: `${base}/{${idName}}`,
      tags,
      summary: `Update a ${one.toLowerCase()} (a new \`position\` moves it)`,
      security,
      request: { params: itemParams, body: jsonBody(updateContentBody) },
      responses: { 200: jsonResponse(envelopeOf(schema), `The ${one.toLowerCase()}`), ...errors(400, 401, 403, 404) },
    }),
    remove: createRoute({
      operationId: kind === 'capabilities' ? 'deleteCapability' : 'deleteStep',
      method: 'delete',
      path: `${base}/{${idName}}`,
      tags,
      summary: `Delete a ${one.toLowerCase()}`,
      security,
      request: { params: itemParams },
      responses: { 200: jsonResponse(envelopeOf(idSchema), 'The deleted id'), ...errors(400, 401, 403, 404) },
    }),
    idName,
  };
}

const listChangelogRoute = createRoute({
  operationId: 'listChangelog',
  method: 'get',
  path: '/agents/{agentId}/changelog',
  tags,
  summary: 'An agent’s changelog, newest first (not paginated)',
  request: { params: agentIdParams },
  responses: { 200: jsonResponse(envelopeOf(z.array(changelogEntrySchema)), 'The changelog'), ...errors(400, 404, 'agentPath') },
});

const addChangelogRoute = createRoute({
  operationId: 'addChangelogEntry',
  method: 'post',
  path: '/agents/{agentId}/changelog',
  tags,
  summary: 'Add a changelog entry',
  security,
  request: { params: agentIdParams, body: jsonBody(addChangelogBody) },
  responses: { 201: jsonResponse(envelopeOf(changelogEntrySchema), 'The entry'), ...errors(400, 401, 403, 404) },
});

const deleteChangelogRoute = createRoute({
  operationId: 'deleteChangelogEntry',
  method: 'delete',
  path: '/agents/{agentId}/changelog/{entryId}',
  tags,
  summary: 'Delete a changelog entry',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId'), entryId: uuidParam('entryId') }) },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The deleted id'), ...errors(400, 401, 403, 404) },
});

const listVideosRoute = createRoute({
  operationId: 'listVideos',
  method: 'get',
  path: '/agents/{agentId}/videos',
  tags,
  summary: 'An agent’s videos, newest first',
  request: { params: agentIdParams },
  responses: { 200: jsonResponse(envelopeOf(z.array(videoSchema)), 'The videos'), ...errors(400, 404, 'agentPath') },
});

const registerVideoRoute = createRoute({
  operationId: 'registerVideo',
  method: 'post',
  path: '/agents/{agentId}/videos',
  tags,
  summary: 'Register a video by the URL of a plain video file (HLS/DASH manifests and non-video URLs: 400)',
  security,
  request: { params: agentIdParams, body: jsonBody(registerVideoBody) },
  responses: { 201: jsonResponse(envelopeOf(videoSchema), 'The video'), ...errors(400, 401, 403, 404) },
});

const deleteVideoRoute = createRoute({
  operationId: 'deleteVideo',
  method: 'delete',
  path: '/agents/{agentId}/videos/{videoId}',
  tags,
  summary: 'Remove a video from an agent',
  security,
  request: { params: z.object({ agentId: uuidParam('agentId'), videoId: uuidParam('videoId') }) },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The deleted id'), ...errors(400, 401, 403, 404) },
});

const createUploadRoute = createRoute({
  operationId: 'createUpload',
  method: 'post',
  path: '/agents/{agentId}/uploads',
  tags,
  summary: 'A presigned PUT URL for an agent image (max 10 MiB) or video (max 500 MiB), valid 15 minutes',
  security,
  request: { params: agentIdParams, body: jsonBody(createUploadBody) },
  responses: { 201: jsonResponse(envelopeOf(uploadSchema), 'Where to upload'), ...errors(400, 401, 403, 404, 503) },
});

export function contentRoutes() {
  const router = newRouter();

  for (const kind of ['capabilities', 'steps'] as const) {
    const r = contentRoutesFor(kind);
    const itemId = (params: Record<string, string>) => params[r.idName]!;

    router.openapi(r.list, async (c) => {
      // Public: content of published agents is readable by anyone.
      const db = c.var.deps.database.db;
      const { agentId } = c.req.valid('param');
      await requireAgent(db, agentId, await viewerIsAdmin(c));
      return c.json(ok(await listContent(db, kind, agentId)), 200);
    });
    router.openapi(r.add, async (c) => {
      await requireAdmin(c);
      const { deps } = c.var;
      const { agentId } = c.req.valid('param');
      return c.json(ok(await addContent(deps.database.db, deps.clock.now(), { kind, agentId, item: c.req.valid('json') })), 201);
    });
    router.openapi(r.update, async (c) => {
      await requireAdmin(c);
      const { deps } = c.var;
      const params = c.req.valid('param');
      const item = await updateContent(deps.database.db, deps.clock.now(), {
        kind,
        agentId: params.agentId!,
        id: itemId(params),
        patch: c.req.valid('json'),
      });
      return c.json(ok(item), 200);
    });
    router.openapi(r.remove, async (c) => {
      await requireAdmin(c);
      const params = c.req.valid('param');
      return c.json(ok(await deleteContent(c.var.deps.database.db, kind, params.agentId!, itemId(params))), 200);
    });
  }

  router.openapi(listChangelogRoute, async (c) => {
    // Public, as the other content lists.
    const db = c.var.deps.database.db;
    const { agentId } = c.req.valid('param');
    await requireAgent(db, agentId, await viewerIsAdmin(c));
    return c.json(ok(await listChangelog(db, agentId)), 200);
  });
  router.openapi(addChangelogRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    return c.json(ok(await addChangelogEntry(deps.database.db, agentId, c.req.valid('json'), deps.clock.now())), 201);
  });
  router.openapi(deleteChangelogRoute, async (c) => {
    await requireAdmin(c);
    const { agentId, entryId } = c.req.valid('param');
    return c.json(ok(await deleteChangelogEntry(c.var.deps.database.db, agentId, entryId)), 200);
  });

  router.openapi(listVideosRoute, async (c) => {
    // Public, as the other content lists.
    const db = c.var.deps.database.db;
    const { agentId } = c.req.valid('param');
    await requireAgent(db, agentId, await viewerIsAdmin(c));
    return c.json(ok(await listVideos(db, agentId)), 200);
  });
  router.openapi(registerVideoRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    return c.json(ok(await registerVideo(deps.database.db, agentId, c.req.valid('json'), deps.clock.now())), 201);
  });
  router.openapi(deleteVideoRoute, async (c) => {
    await requireAdmin(c);
    const { agentId, videoId } = c.req.valid('param');
    return c.json(ok(await deleteVideo(c.var.deps.database.db, agentId, videoId)), 200);
  });

  router.openapi(createUploadRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { agentId } = c.req.valid('param');
    await requireAgent(deps.database.db, agentId, true);
    const upload = await createUpload(deps.storage, { agentId, ...c.req.valid('json') }, deps.clock.now());
    return c.json(ok(upload), 201);
  });

  return router;
}
