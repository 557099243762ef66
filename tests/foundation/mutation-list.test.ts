import { describe, expect, it } from 'vitest';
import { mutations, staleness } from '../../scripts/mutation/trust-rules.ts';

/**
 * The mutation check (scripts/mutation/trust-rules.ts, docs/security.md) proves each trust rule's tests fail without
 * the rule, but only while each mutation still names code the tests meet. Twenty rows had drifted unnoticed between
 * full runs: six named code that had changed, and fourteen edited a migration's function whose later restatement is
 * what runs (a mutation there survives whatever the tests guard). The list follows the code in every run of the suite.
 */
describe('the mutation list of the trust rules', () => {
  it('names, in every row, code that exists and is the definition the tests meet', () => {
    const stale = mutations.map((m) => ({ name: m.name, why: staleness(m) })).filter((m) => m.why !== null);
    expect(stale).toEqual([]);
  });

  it('tells a mutation of a restated migration function from a live one', () => {
    const live = mutations.find((m) => m.file.includes('20261127004900_restart_keeps_counter_time.sql'))!;
    expect(staleness(live)).toBeNull();
    const overwritten = { ...live, file: 'supabase/migrations/20261127000500_quota_mail_counts_what_was_used.sql', find: '  v_at := case when tg_op = \'INSERT\' then new.created_at else new.updated_at end;' };
    expect(staleness(overwritten)).toMatch(/restated by 2026112700/);
  });
});
