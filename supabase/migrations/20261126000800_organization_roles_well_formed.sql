-- Organization roles are exactly one of owner, admin, member, or several joined by commas (found by a review; the
-- rule lives in functions/auth/invitation-rules.ts assertWellFormedRole, which now refuses anything else).
--
-- The organization plugin let an admin invite "admin, owner": its "only an owner may make an owner" check split the
-- role without trimming, every later check trimmed, so the member it made counted as an owner. Rows an attack left
-- before the rule are made harmless here: such a member becomes a plain member, such a pending invitation is
-- canceled. Nothing the API wrote otherwise has a role of another shape.
update public."member" set role = 'member'
 where role !~ '^(owner|admin|member)(,(owner|admin|member))*$';
update public."invitation" set status = 'canceled'
 where status = 'pending' and role is not null and role !~ '^(owner|admin|member)(,(owner|admin|member))*$';
