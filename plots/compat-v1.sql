-- plots/compat-v1.sql: read before lib.sql on a schema-1 results database
-- (PRAGMA user_version = 1, before requests.state_equal): temp views that
-- shadow main.requests and main.runs with the current columns, NULL where
-- version 1 had none. The same views as compat_views[1] in harness/store/store.c.
CREATE TEMP VIEW requests AS SELECT *, NULL AS state_equal, NULL AS state_hash_cold,
    NULL AS state_hash_reuse, NULL AS cache_bytes, NULL AS cache_entries FROM main.requests;
CREATE TEMP VIEW runs AS SELECT *, NULL AS policy_opts, NULL AS block_size FROM main.runs;
