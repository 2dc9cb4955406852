-- plots/compat-v5.sql: read before lib.sql on a schema-5 results database
-- (PRAGMA user_version = 5: kvreplay serve's version, issue #20; it did not
-- change runs or requests on this branch): temp views that
-- shadow main.runs and main.requests with the current columns, NULL where version 5 had none.
-- The same views as compat_views[5] in harness/store/store.c.
CREATE TEMP VIEW runs AS SELECT *, NULL AS spec_sha256, NULL AS scale, NULL AS unit, NULL AS n_units,
    NULL AS shard, NULL AS n_shards, NULL AS plan_sha256 FROM main.runs;
CREATE TEMP VIEW requests AS SELECT * FROM main.requests;
