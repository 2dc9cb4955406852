-- plots/compat-v7.sql: read before lib.sql on a schema-7 results database
-- (PRAGMA user_version = 7, before replay --batch-check's columns): temp views
-- that shadow main.runs and main.requests with the current columns, NULL where
-- version 7 had none. The same views as compat_views[7] in
-- harness/store/store_schema.c.
CREATE TEMP VIEW runs AS SELECT * FROM main.runs;
CREATE TEMP VIEW requests AS SELECT *, NULL AS batch_k, NULL AS batch_equal, NULL AS batch_first_diff,
    NULL AS batch_ulp_first, NULL AS batch_max_ulp FROM main.requests;
