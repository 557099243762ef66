/**
 * Whole Stripe API objects as the pinned API version returns them, for the fake server: every property the
 * API always sends is here, with the value a test-mode account without tax, discounts, Connect or shipping
 * gets. The fake sets the fields the marketplace reads (status, items, periods, metadata, ...); the rest keep
 * these defaults. tests/stripe-fake/openapi-shapes.once.test.ts checks each against the `stripe` package's
 * declarations (generated from Stripe's OpenAPI document), so a field added, renamed or retyped there fails it.
 */

type Json = Record<string, any>;

const list = (url: string, data: Json[] = []) => ({ object: 'list', data, has_more: false, url });

export function customerObject(fields: { id: string; created: number; email: string | null; name: string | null; metadata: Json }): Json {
  return {
    object: 'customer',
    address: null,
    balance: 0,
    currency: null,
    default_source: null,
    delinquent: false,
    description: null,
    discount: null,
    invoice_prefix: fields.id.slice(4, 12).toUpperCase(),
    invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
    livemode: false,
    phone: null,
    preferred_locales: [],
    shipping: null,
    tax_exempt: 'none',
    test_clock: null,
    ...fields,
  };
}

export function productObject(fields: { id: string; created: number; name: string; metadata: Json }): Json {
  return {
    object: 'product',
    active: true,
    default_price: null,
    description: null,
    images: [],
    livemode: false,
    marketing_features: [],
    package_dimensions: null,
    shippable: null,
    statement_descriptor: null,
    tax_code: null,
    tax_details: null,
    type: 'service',
    unit_label: null,
    updated: fields.created,
    url: null,
    ...fields,
  };
}

export function priceObject(fields: { id: string; created: number; product: string; unit_amount: number; currency: string; interval: string; metadata: Json }): Json {
  const { interval, ...rest } = fields;
  return {
    object: 'price',
    active: true,
    billing_scheme: 'per_unit',
    custom_unit_amount: null,
    livemode: false,
    lookup_key: null,
    nickname: null,
    recurring: { interval, interval_count: 1, meter: null, trial_period_days: null, usage_type: 'licensed' },
    tax_behavior: 'unspecified',
    tiers_mode: null,
    transform_quantity: null,
    type: 'recurring',
    unit_amount_decimal: String(fields.unit_amount),
    ...rest,
  };
}

/** The legacy Plan view of a recurring price that subscription items still carry. */
function planOf(price: Json): Json {
  return {
    id: price.id,
    object: 'plan',
    active: price.active,
    amount: price.unit_amount,
    amount_decimal: price.unit_amount_decimal,
    billing_scheme: 'per_unit',
    created: price.created,
    currency: price.currency,
    interval: price.recurring.interval,
    interval_count: price.recurring.interval_count,
    livemode: false,
    metadata: price.metadata,
    meter: null,
    nickname: null,
    product: price.product,
    tiers_mode: null,
    transform_usage: null,
    trial_period_days: null,
    usage_type: 'licensed',
  };
}

export function subscriptionItemObject(fields: { id: string; created: number; subscription: string; price: Json; current_period_start: number; current_period_end: number }): Json {
  return {
    object: 'subscription_item',
    billing_thresholds: null,
    current_trial: null,
    discounts: [],
    metadata: {},
    plan: planOf(fields.price),
    quantity: 1,
    tax_rates: [],
    ...fields,
  };
}

/** Keeps an item's legacy `plan` in step with its price, as Stripe does when the price changes. */
export function setItemPrice(item: Json, price: Json): void {
  item.price = structuredClone(price);
  item.plan = planOf(price);
}

export function checkoutSessionObject(fields: Json & { id: string; created: number; currency: string; amount: number }): Json {
  const { amount, ...rest } = fields;
  return {
    object: 'checkout.session',
    adaptive_pricing: null,
    after_expiration: null,
    allow_promotion_codes: null,
    allowed_payment_method_types: null,
    amount_subtotal: amount,
    amount_total: amount,
    automatic_tax: { enabled: false, liability: null, provider: null, status: null },
    billing_address_collection: null,
    client_secret: null,
    collected_information: null,
    consent: null,
    consent_collection: null,
    currency_conversion: null,
    custom_fields: [],
    custom_text: { after_submit: null, shipping_address: null, submit: null, terms_of_service_acceptance: null },
    customer_account: null,
    customer_creation: fields.customer ? null : 'always',
    discounts: [],
    integration_identifier: null,
    invoice: null,
    invoice_creation: null,
    livemode: false,
    locale: null,
    managed_payments: null,
    origin_context: null,
    payment_intent: null,
    payment_link: null,
    payment_method_collection: 'always',
    payment_method_configuration_details: null,
    payment_method_options: {},
    payment_method_types: ['card'],
    permissions: null,
    recovered_from: null,
    saved_payment_method_options: null,
    setup_intent: null,
    shipping_address_collection: null,
    shipping_cost: null,
    shipping_options: [],
    submit_type: null,
    total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
    ui_mode: 'hosted_page',
    wallet_options: null,
    ...rest,
  };
}

/** `customer_details` of a completed session. */
export function checkoutCustomerDetails(customer: Json): Json {
  return {
    address: null,
    business_name: null,
    email: customer.email,
    individual_name: null,
    name: customer.name,
    phone: null,
    tax_exempt: 'none',
    tax_ids: [],
  };
}

export function subscriptionObject(fields: Json & { id: string; created: number; items: Json[] }): Json {
  const { items, ...rest } = fields;
  return {
    object: 'subscription',
    application: null,
    application_fee_percent: null,
    automatic_tax: { disabled_reason: null, enabled: false, liability: null },
    billing_cycle_anchor: fields.created,
    billing_cycle_anchor_config: null,
    billing_mode: { flexible: null, type: 'classic' },
    billing_schedules: [],
    billing_thresholds: null,
    cancellation_details: { comment: null, feedback: null, feedback_option: null, reason: null },
    collection_method: 'charge_automatically',
    customer_account: null,
    days_until_due: null,
    default_payment_method: null,
    default_source: null,
    description: null,
    discounts: [],
    invoice_settings: { account_tax_ids: null, custom_fields: null, description: null, footer: null, issuer: { type: 'self' } },
    items: list(`/v1/subscription_items?subscription=${fields.id}`, items),
    livemode: false,
    managed_payments: null,
    next_pending_invoice_item_invoice: null,
    on_behalf_of: null,
    pause_collection: null,
    payment_settings: { payment_method_options: null, payment_method_types: null, save_default_payment_method: 'off' },
    pending_invoice_item_interval: null,
    pending_setup_intent: null,
    test_clock: null,
    transfer_data: null,
    trial_end: null,
    trial_settings: { end_behavior: { billing_cycle_anchor: null, missing_payment_method: 'create_invoice' } },
    trial_start: null,
    ...rest,
  };
}

export function invoiceObject(fields: Json & { id: string; created: number; amount_due: number; customer: Json; subscription: Json; period_start: number; period_end: number }): Json {
  const { customer, subscription, ...rest } = fields;
  return {
    object: 'invoice',
    account_country: 'US',
    account_name: 'Marketplace (test)',
    account_tax_ids: null,
    amount_overpaid: 0,
    amount_remaining: fields.amount_due,
    amount_shipping: 0,
    application: null,
    attempted: false,
    automatic_tax: { disabled_reason: null, enabled: false, liability: null, provider: null, status: null },
    automatically_finalizes_at: null,
    collection_method: 'charge_automatically',
    custom_fields: null,
    customer: customer.id,
    customer_account: null,
    customer_address: null,
    customer_email: customer.email,
    customer_name: customer.name,
    customer_phone: null,
    customer_shipping: null,
    customer_tax_exempt: 'none',
    default_payment_method: null,
    default_source: null,
    default_tax_rates: [],
    description: null,
    discounts: [],
    due_date: null,
    effective_at: fields.created,
    ending_balance: 0,
    footer: null,
    from_invoice: null,
    issuer: { type: 'self' },
    last_finalization_error: null,
    latest_revision: null,
    lines: list(`/v1/invoices/${fields.id}/lines`),
    livemode: false,
    metadata: {},
    next_payment_attempt: null,
    number: null,
    on_behalf_of: null,
    parent: {
      quote_details: null,
      subscription_details: { metadata: { ...subscription.metadata }, subscription: subscription.id },
      type: 'subscription_details',
    },
    payment_settings: { default_mandate: null, payment_method_options: null, payment_method_types: null },
    post_payment_credit_notes_amount: 0,
    pre_payment_credit_notes_amount: 0,
    receipt_number: null,
    rendering: null,
    shipping_cost: null,
    shipping_details: null,
    starting_balance: 0,
    statement_descriptor: null,
    status_transitions: { finalized_at: fields.created, marked_uncollectible_at: null, paid_at: null, voided_at: null },
    subtotal: fields.amount_due,
    subtotal_excluding_tax: fields.amount_due,
    test_clock: null,
    total: fields.amount_due,
    total_discount_amounts: [],
    total_excluding_tax: fields.amount_due,
    total_pretax_credit_amounts: [],
    total_taxes: [],
    webhooks_delivered_at: null,
    ...rest,
  };
}

export function schedulePhaseObject(fields: { start_date: number; end_date: number; price: string; quantity: number; currency: string }): Json {
  return {
    add_invoice_items: [],
    application_fee_percent: null,
    billing_cycle_anchor: null,
    billing_thresholds: null,
    collection_method: null,
    currency: fields.currency,
    default_payment_method: null,
    description: null,
    discounts: [],
    end_date: fields.end_date,
    invoice_settings: null,
    items: [{ billing_thresholds: null, discounts: [], metadata: {}, plan: fields.price, price: fields.price, quantity: fields.quantity, tax_rates: [] }],
    metadata: {},
    on_behalf_of: null,
    proration_behavior: 'create_prorations',
    start_date: fields.start_date,
    transfer_data: null,
    trial_end: null,
  };
}

export function subscriptionScheduleObject(fields: Json & { id: string; created: number }): Json {
  return {
    object: 'subscription_schedule',
    application: null,
    billing_mode: { flexible: null, type: 'classic' },
    completed_at: null,
    customer_account: null,
    default_settings: {
      application_fee_percent: null,
      automatic_tax: { disabled_reason: null, enabled: false, liability: null },
      billing_cycle_anchor: 'automatic',
      billing_thresholds: null,
      collection_method: 'charge_automatically',
      default_payment_method: null,
      description: null,
      invoice_settings: { account_tax_ids: null, custom_fields: null, days_until_due: null, description: null, footer: null, issuer: { type: 'self' } },
      on_behalf_of: null,
      transfer_data: null,
    },
    livemode: false,
    pause_schedules: [],
    test_clock: null,
    ...fields,
  };
}

/**
 * A customer portal configuration. `features` as a create call gives them (form strings), completed with Stripe's
 * defaults for what it leaves out; the account's default configuration (`is_default`) lets customers switch plans, as
 * an account whose owner turned that on in the Dashboard does.
 */
export function portalConfigurationObject(fields: { id: string; created: number; is_default: boolean; features: Json; metadata: Json }): Json {
  const f = fields.features ?? {};
  const on = (v: unknown, otherwise: boolean) => (v === undefined ? otherwise : v === true || v === 'true');
  return {
    id: fields.id,
    object: 'billing_portal.configuration',
    active: true,
    application: null,
    business_profile: { headline: null, privacy_policy_url: null, terms_of_service_url: null },
    created: fields.created,
    default_return_url: null,
    features: {
      customer_update: { allowed_updates: f.customer_update?.allowed_updates ?? [], enabled: on(f.customer_update?.enabled, false) },
      invoice_history: { enabled: on(f.invoice_history?.enabled, false) },
      payment_method_update: { enabled: on(f.payment_method_update?.enabled, false), payment_method_configuration: null },
      subscription_cancel: {
        cancellation_reason: { enabled: false, feedback_options: null, options: [] },
        enabled: on(f.subscription_cancel?.enabled, false),
        mode: f.subscription_cancel?.mode ?? 'at_period_end',
        proration_behavior: f.subscription_cancel?.proration_behavior ?? 'none',
      },
      subscription_pause: { duration: { interval_options: [], type: 'indefinite' }, enabled: on(f.subscription_pause?.enabled, false) },
      subscription_update: {
        billing_cycle_anchor: null,
        default_allowed_updates: f.subscription_update?.default_allowed_updates ?? [],
        enabled: on(f.subscription_update?.enabled, false),
        proration_behavior: f.subscription_update?.proration_behavior ?? 'create_prorations',
        schedule_at_period_end: { conditions: [] },
        trial_update_behavior: 'end_trial',
      },
    },
    is_default: fields.is_default,
    livemode: false,
    login_page: { enabled: false, url: null },
    metadata: fields.metadata ?? {},
    name: null,
    updated: fields.created,
  };
}

export function portalSessionObject(fields: Json & { id: string; created: number }): Json {
  return {
    object: 'billing_portal.session',
    customer_account: null,
    livemode: false,
    locale: null,
    on_behalf_of: null,
    ...fields,
  };
}

/** The payment of a paid invoice (Stripe's invoice payments: one per payment intent that paid it). */
export function invoicePaymentObject(fields: { id: string; created: number; invoice: string; amount: number; currency: string; payment_intent: string }): Json {
  return {
    id: fields.id,
    object: 'invoice_payment',
    amount_paid: fields.amount,
    amount_requested: fields.amount,
    created: fields.created,
    currency: fields.currency,
    invoice: fields.invoice,
    is_default: true,
    livemode: false,
    payment: { type: 'payment_intent', payment_intent: fields.payment_intent },
    status: 'paid',
    status_transitions: { canceled_at: null, paid_at: fields.created },
  };
}

export function refundObject(fields: { id: string; created: number; amount: number; currency: string; payment_intent: string; reason: string | null; metadata: Json }): Json {
  return {
    object: 'refund',
    balance_transaction: null,
    charge: null,
    customer: null,
    customer_account: null,
    payment_method: null,
    receipt_number: null,
    source_transfer_reversal: null,
    status: 'succeeded',
    transfer_reversal: null,
    ...fields,
  };
}


/** A chargeback the cardholder's bank opened on a payment (Stripe's `charge.dispute.created`), before any evidence. */
export function disputeObject(fields: { id: string; created: number; amount: number; currency: string; payment_intent: string; reason: string }): Json {
  const evidenceFields = [
    'access_activity_log', 'billing_address', 'cancellation_policy', 'cancellation_policy_disclosure', 'cancellation_rebuttal',
    'customer_communication', 'customer_email_address', 'customer_name', 'customer_purchase_ip', 'customer_signature',
    'duplicate_charge_documentation', 'duplicate_charge_explanation', 'duplicate_charge_id', 'product_description', 'receipt',
    'refund_policy', 'refund_policy_disclosure', 'refund_refusal_explanation', 'service_date', 'service_documentation',
    'shipping_address', 'shipping_carrier', 'shipping_date', 'shipping_documentation', 'shipping_tracking_number',
    'uncategorized_file', 'uncategorized_text',
  ];
  return {
    id: fields.id,
    object: 'dispute',
    amount: fields.amount,
    balance_transactions: [],
    // the charge behind the payment intent (the fake keeps no charges: the marketplace reads the payment intent)
    charge: `ch_${fields.payment_intent.replace(/^pi_/, '')}`,
    created: fields.created,
    currency: fields.currency,
    enhanced_eligibility_types: [],
    evidence: { ...Object.fromEntries(evidenceFields.map((f) => [f, null])), enhanced_evidence: {} },
    evidence_details: { due_by: fields.created + 21 * 86_400, enhanced_eligibility: {}, has_evidence: false, past_due: false, submission_count: 0, submission_method: 'not_submitted' },
    intended_submission_method: null,
    is_charge_refundable: false,
    livemode: false,
    metadata: {},
    payment_intent: fields.payment_intent,
    reason: fields.reason,
    status: 'needs_response',
  };
}
