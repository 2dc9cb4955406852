-- plots/compat-v2.sql: read before lib.sql on a schema-2 results database
-- (PRAGMA user_version = 2, before requests.cache_bytes and runs.block_size):
-- temp views that shadow main.requests and main.runs with the current
-- columns, NULL where version 2 had none. The same views as compat_views[2]
-- in harness/store/store.c.
CREATE TEMP VIEW requests AS SELECT *, NULL AS cache_bytes, NULL AS cache_entries FROM main.requests;
CREATE TEMP VIEW runs AS SELECT *, NULL AS policy_opts, NULL AS block_size FROM main.runs;
