-- public.organization_role_is_owner (20261127000800, made a wrapper of organization_role_has in 20261127001000) has no
-- caller left: the owner rule restated in 20261127001500 asks organization_role_has(role, 'owner'), and the two other
-- callers (the removal's first hand-over, the first invitation rule) were dropped in 20261127001500 and 20261127001600.
-- One reading of a role list stays: organization_role_has.
drop function public.organization_role_is_owner(text);
