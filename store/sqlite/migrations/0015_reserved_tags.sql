-- Reserved for schema 15 (the tags lane: events' tags and tag limits),
-- merged separately; this branch's schema 16 follows it. The merge
-- replaces this file with that lane's step 15.
SELECT 1;
