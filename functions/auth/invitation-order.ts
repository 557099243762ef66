import { OperationNodeTransformer, OrderByItemNode, SelectQueryNode, sql, type OperationNode } from 'kysely';
import { TransformingPlugin } from './empty-lists.ts';

/**
 * The auth library's reads of invitations list the pending ones first, newest first, on the auth library's handle
 * only. The library reads every list with a limit of 100 rows (its defaultFindManyLimit) and no order, and an
 * organization's invitations (list-invitations, get-full-organization) and an address's (list-user-invitations) are
 * read in every status: once an organization had sent more than 100 over its life (a re-invite or a resend makes a
 * new row and leaves the old one canceled), or an address had declined 100, the pending invitations sent next were
 * missing from what the owner or the invitee read (found by review 48). Pending ones are at most 100 per
 * organization (the plugin's invitationLimit), so all of them are within the first 100 rows now.
 */
export class PendingInvitationsFirstPlugin extends TransformingPlugin {
  constructor() {
    super(new PendingInvitationsFirst());
  }
}

/**
 * Orders a select that reads invitations and orders nothing itself: one of the invitation table with a limit (the
 * library's findMany, `select * from invitation where ... limit 100`, as the subquery its reads select from), or one
 * joining the invitation table (get-full-organization's, whose joined rows the library cuts at 100 in their order).
 * A count has neither, and is left alone.
 */
class PendingInvitationsFirst extends OperationNodeTransformer {
  protected override transformSelectQuery(node: SelectQueryNode, queryId?: Parameters<OperationNodeTransformer['transformNode']>[1]): SelectQueryNode {
    const inner = super.transformSelectQuery(node, queryId);
    if (inner.orderBy) return inner;
    const read = (inner.from?.froms ?? []).map(tableName).find((t) => t?.table === 'invitation');
    const joined = (inner.joins ?? []).map((join) => tableName(join.table)).find((t) => t?.table === 'invitation');
    const invitations = read && inner.limit ? (read.alias ?? 'invitation') : joined ? (joined.alias ?? 'invitation') : undefined;
    if (!invitations) return inner;
    const desc = sql.raw('desc').toOperationNode();
    return SelectQueryNode.cloneWithOrderByItems(inner, [
      OrderByItemNode.create(sql.raw(`("${invitations}"."status" = 'pending')`).toOperationNode(), desc),
      OrderByItemNode.create(sql.raw(`"${invitations}"."createdAt"`).toOperationNode(), desc),
      OrderByItemNode.create(sql.raw(`"${invitations}"."id"`).toOperationNode(), desc),
    ]);
  }
}

function tableName(node: OperationNode): { table: string; alias?: string } | undefined {
  const any = node as unknown as {
    kind: string;
    table?: { identifier?: { name?: string } };
    node?: OperationNode;
    alias?: { name?: string };
  };
  if (any.kind === 'TableNode') return any.table?.identifier?.name ? { table: any.table.identifier.name } : undefined;
  if (any.kind === 'AliasNode' && any.node) {
    const inner = tableName(any.node);
    return inner && any.alias?.name ? { table: inner.table, alias: any.alias.name } : undefined;
  }
  return undefined;
}
