-- plots/compat-v1.sql: read before lib.sql on a schema-1 results database
-- (PRAGMA user_version = 1, before requests.state_equal): a temp view that
-- shadows main.requests with the current columns, NULL where version 1 had
-- none. The same view as compat_views[1] in harness/store/store.c.
CREATE TEMP VIEW requests AS SELECT *, NULL AS state_equal, NULL AS state_hash_cold,
    NULL AS state_hash_reuse FROM main.requests;
