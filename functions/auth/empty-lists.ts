import {
  OperationNodeTransformer,
  sql,
  type BinaryOperationNode,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';

/** A Kysely plugin that runs `transformer` over every query of the handle it is added to, and leaves results as they are. */
export class TransformingPlugin implements KyselyPlugin {
  readonly #transformer: OperationNodeTransformer;

  constructor(transformer: OperationNodeTransformer) {
    this.#transformer = transformer;
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    return this.#transformer.transformNode(args.node, args.queryId);
  }

  transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return Promise.resolve(args.result);
  }
}

/**
 * `x in ()` and `x not in ()` as `false` and `true`, on the auth library's handle only. The organization plugin's
 * list-members reads the page's users with `id in (<the page's member ids>)` without looking whether the page has
 * any: a filter that matched no member, or an offset past the last one, made `in ()`, a syntax error, a 500
 * (found while bounding the plugin's input after a review). PostgreSQL has no empty list; the empty list's meaning
 * is what these constants say, so every such query of the library answers as it means to.
 */
export class EmptyListsPlugin extends TransformingPlugin {
  constructor() {
    super(new EmptyListTransformer());
  }
}

class EmptyListTransformer extends OperationNodeTransformer {
  protected override transformBinaryOperation(node: BinaryOperationNode, queryId?: Parameters<OperationNodeTransformer['transformNode']>[1]): BinaryOperationNode {
    const operator = node.operator.kind === 'OperatorNode' ? (node.operator as unknown as { operator: string }).operator : undefined;
    const right = node.rightOperand as unknown as { kind: string; values?: readonly unknown[] };
    const emptyList = (right.kind === 'PrimitiveValueListNode' || right.kind === 'ValueListNode') && right.values?.length === 0;
    if (emptyList && (operator === 'in' || operator === 'not in')) {
      // (a raw node where the transformer's type says binary operation: the compiler takes any node there)
      return sql.raw(operator === 'in' ? 'false' : 'true').toOperationNode() as unknown as BinaryOperationNode;
    }
    return super.transformBinaryOperation(node, queryId);
  }
}
