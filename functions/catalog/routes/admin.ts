import { createRoute, z } from '@hono/zod-openapi';
import { requireAdmin } from '../../http/access.ts';
import { envelopeOf, ok, okPage, pageEnvelopeOf } from '../../http/envelope.ts';
import { adminPageQuery, adminQuery } from '../../http/pagination.ts';
import { errors, jsonBody, jsonResponse, newRouter, uuidParam } from '../../http/router.ts';
import { listInteractions } from '../interactions.ts';
import { addRecipient, listRecipients, removeRecipient, updateRecipient } from '../notification-recipients.ts';
import {
  addRecipientBody,
  interactionSchema,
  interactionTypeSchema,
  notificationRecipientSchema,
  updateRecipientBody,
} from '../schemas.ts';
import { security } from './agents.ts';

/** Administration of the catalog's engagement: the interaction feed and the demo-request mail recipients. */

const tags = ['Administration'];
const recipientParams = z.object({ recipientId: uuidParam('recipientId') });
const idSchema = z.object({ id: z.uuid() });

const listInteractionsRoute = createRoute({
  operationId: 'listInteractions',
  method: 'get',
  path: '/admin/interactions',
  tags,
  summary: 'The interaction feed, newest first (paginated, filter by type)',
  security,
  request: { query: adminPageQuery({ type: interactionTypeSchema.optional().openapi({ param: { name: 'type', in: 'query' } }) }) },
  responses: { 200: jsonResponse(pageEnvelopeOf(interactionSchema), 'A page of interactions'), ...errors(400, 401, 403) },
});

const listRecipientsRoute = createRoute({
  operationId: 'listNotificationRecipients',
  method: 'get',
  path: '/admin/notification-recipients',
  tags,
  summary: 'Who is mailed about demo requests (not paginated)',
  security,
  // Not paginated: `?limit=0` (or any key) is an unknown key, a 400, not a list that ignored it
  request: { query: adminQuery({}) },
  responses: { 200: jsonResponse(envelopeOf(z.array(notificationRecipientSchema)), 'The recipients'), ...errors(400, 401, 403) },
});

const addRecipientRoute = createRoute({
  operationId: 'addNotificationRecipient',
  method: 'post',
  path: '/admin/notification-recipients',
  tags,
  summary: 'Add a recipient (email unique, case-insensitive)',
  security,
  request: { body: jsonBody(addRecipientBody) },
  responses: { 201: jsonResponse(envelopeOf(notificationRecipientSchema), 'The recipient'), ...errors(400, 401, 403, 409) },
});

const updateRecipientRoute = createRoute({
  operationId: 'updateNotificationRecipient',
  method: 'patch',
  path: '/admin/notification-recipients/{recipientId}',
  tags,
  summary: 'Change a recipient’s email or name',
  security,
  request: { params: recipientParams, body: jsonBody(updateRecipientBody) },
  responses: { 200: jsonResponse(envelopeOf(notificationRecipientSchema), 'The recipient'), ...errors(400, 401, 403, 404, 409) },
});

const removeRecipientRoute = createRoute({
  operationId: 'removeNotificationRecipient',
  method: 'delete',
  path: '/admin/notification-recipients/{recipientId}',
  tags,
  summary: 'Remove a recipient',
  security,
  request: { params: recipientParams },
  responses: { 200: jsonResponse(envelopeOf(idSchema), 'The removed id'), ...errors(400, 401, 403, 404) },
});

export function catalogAdminRoutes() {
  const router = newRouter();

  router.openapi(listInteractionsRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { items, pagination } = await listInteractions(deps.database.db, deps.cursors, c.req.valid('query'));
    return c.json(okPage(items, pagination), 200);
  });
  router.openapi(listRecipientsRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await listRecipients(c.var.deps.database.db)), 200);
  });
  router.openapi(addRecipientRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    return c.json(ok(await addRecipient(deps.database.db, c.req.valid('json'), deps.clock.now())), 201);
  });
  router.openapi(updateRecipientRoute, async (c) => {
    await requireAdmin(c);
    const { deps } = c.var;
    const { recipientId } = c.req.valid('param');
    return c.json(ok(await updateRecipient(deps.database.db, recipientId, c.req.valid('json'), deps.clock.now())), 200);
  });
  router.openapi(removeRecipientRoute, async (c) => {
    await requireAdmin(c);
    return c.json(ok(await removeRecipient(c.var.deps.database.db, c.req.valid('param').recipientId)), 200);
  });

  return router;
}
